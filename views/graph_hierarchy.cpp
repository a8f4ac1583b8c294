#include "views/graph_hierarchy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

namespace shardscope::views {

namespace {

using Item = VisibleTree::Item;
using Point = std::pair<double, double>;

// Items as integers (kind in the top bits) for the edge pass over the whole module.
int64_t Code(const Item& item) { return (static_cast<int64_t>(item.kind) << 48) | item.id; }
Item Decode(int64_t code) {
  return {static_cast<Item::Kind>(code >> 48), code & ((int64_t{1} << 48) - 1)};
}

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    uint64_t h = static_cast<uint64_t>(p.first) * 0x9E3779B97F4A7C15ULL;
    h ^= static_cast<uint64_t>(p.second) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A cubic from a to b leaving downwards and arriving from above.
void AppendConnector(std::vector<Point>& points, Point a, Point b) {
  const double d = std::max(12.0, std::abs(b.second - a.second) / 2);
  if (points.empty()) points.push_back(a);
  points.push_back({a.first, a.second + d});
  points.push_back({b.first, b.second - d});
  points.push_back(b);
}

}  // namespace

HierarchyLayout LayOutHierarchy(const HierarchyInput& input, const GroupLayouter& layouter,
                                const CancellationToken& cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  HierarchyLayout out;
  out.engine = "dot";
  if (!input.tree) {
    out.error = "no graph";
    return out;
  }
  const ScopeTree& tree = *input.tree;
  const VisibleTree vt(input.tree, input.state);
  auto size_of = [&](const std::string& key) -> std::pair<double, double> {
    auto it = input.sizes.find(key);
    return it == input.sizes.end() ? std::make_pair(120.0, 48.0) : it->second;
  };

  // ---- Each open group on its own, children first.
  std::unordered_map<int, std::shared_ptr<const LayoutResult>> layouts;
  std::unordered_map<int, std::pair<double, double>> inner;  // open group -> its layout's size
  std::unordered_map<int, std::pair<double, double>> frame;  // open group -> its frame's size
  std::unordered_map<int, std::vector<Item>> items_of;
  for (int s : vt.openScopes()) {
    if (cancel.cancelled()) {
      out.cancelled = true;
      return out;
    }
    std::vector<Item> items = vt.items(s);
    LayoutInput in;
    std::string key = input.cache_prefix + "|" + std::to_string(s);
    for (const Item& item : items) {
      const std::string k = item.key();
      std::pair<double, double> size =
          item.kind == Item::Kind::kOpen ? frame.at(static_cast<int>(item.id)) : size_of(k);
      in.nodes.push_back({k, size.first, size.second, ""});
      key += "|" + k + ":" + Num(size.first) + "x" + Num(size.second);
    }
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& e : tree.slotEdges(s)) {
      std::string a = vt.itemForSlot(s, e.tail).key(), b = vt.itemForSlot(s, e.head).key();
      if (a == b) continue;
      if (seen.emplace(a, b).second) in.edges.push_back({std::move(a), std::move(b)});
    }
    bool from_cache = false;
    std::shared_ptr<const LayoutResult> result = layouter(key, in, &from_cache);
    if (!result || !result->ok) {
      out.error = result ? result->error : "no layout";
      return out;
    }
    if (result->engine != "dot") out.engine = result->engine;
    if (!result->error.empty()) out.error = result->error;
    ++out.groups;
    if (from_cache) ++out.groups_cached;
    const double min_w = s == 0 ? 0 : size_of(ClusterKey(s)).first;
    inner[s] = {result->width, result->height};
    frame[s] = {std::max(result->width, min_w) + 2 * kClusterPad, result->height + kClusterHeader + kClusterPad};
    layouts[s] = std::move(result);
    items_of[s] = std::move(items);
  }

  // ---- Place the groups inside each other, parents first.
  std::unordered_map<int, Point> origin{{0, {0, 0}}};
  std::unordered_map<std::string, LayoutBox> open_boxes;  // "c<scope>" -> frame, absolute
  const auto& open = vt.openScopes();
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    const int s = *it;
    const Point o = origin.at(s);
    const LayoutResult& r = *layouts.at(s);
    for (const Item& item : items_of.at(s)) {
      const std::string k = item.key();
      auto b = r.nodes.find(k);
      if (b == r.nodes.end()) continue;
      LayoutBox box = b->second;
      box.x += o.first;
      box.y += o.second;
      if (item.kind == Item::Kind::kOpen) {
        const int c = static_cast<int>(item.id);
        const auto [w, h] = inner.at(c);
        origin[c] = {box.x + kClusterPad + (box.w - 2 * kClusterPad - w) / 2, box.y + kClusterHeader};
        open_boxes[k] = box;
        out.clusters.push_back({c, box});
      } else {
        out.nodes[k] = box;
      }
    }
  }
  out.width = layouts.at(0)->width;
  out.height = layouts.at(0)->height;
  if (cancel.cancelled()) {
    out.cancelled = true;
    return out;
  }

  // ---- Edges: one per pair of visible nodes, with a count.
  std::unordered_map<std::pair<int64_t, int64_t>, int, PairHash> pairs;
  for (const auto& [tp, hp] : tree.edges()) {
    const int64_t a = Code(vt.itemAt(tp)), b = Code(vt.itemAt(hp));
    if (a != b) ++pairs[{a, b}];
  }
  std::vector<std::pair<std::pair<int64_t, int64_t>, int>> sorted(pairs.begin(), pairs.end());
  std::sort(sorted.begin(), sorted.end());
  // The routes of each group's layout by (tail, head).
  std::unordered_map<int, std::unordered_map<std::string, const LayoutEdgePath*>> routes;
  auto route = [&](int g, const std::string& a, const std::string& b) -> const LayoutEdgePath* {
    auto [it, inserted] = routes.try_emplace(g);
    if (inserted) {
      for (const auto& e : layouts.at(g)->edges) it->second[e.tail + "\n" + e.head] = &e;
    }
    auto r = it->second.find(a + "\n" + b);
    return r == it->second.end() ? nullptr : r->second;
  };
  for (const auto& [pair, count] : sorted) {
    const Item a = Decode(pair.first), b = Decode(pair.second);
    const std::string ka = a.key(), kb = b.key();
    auto ba = out.nodes.find(ka), bb = out.nodes.find(kb);
    if (ba == out.nodes.end() || bb == out.nodes.end()) continue;
    HierarchyEdge edge;
    edge.tail = ka;
    edge.head = kb;
    edge.count = count;
    const int oa = vt.ownerOf(a), ob = vt.ownerOf(b);
    const int g = tree.commonAncestor(oa, ob);
    const std::string ga = oa == g ? ka : ClusterKey(tree.childOnPath(g, oa));
    const std::string gb = ob == g ? kb : ClusterKey(tree.childOnPath(g, ob));
    const Point tail_bottom{ba->second.x + ba->second.w / 2, ba->second.y + ba->second.h};
    const Point head_top{bb->second.x + bb->second.w / 2, bb->second.y};
    const LayoutEdgePath* path = route(g, ga, gb);
    edge.nested = ga != ka || gb != kb;
    if (!path || path->points.size() < 4) {
      AppendConnector(edge.points, tail_bottom, {head_top.first, head_top.second - 6});
      edge.has_arrow = true;
      edge.arrow_tip = head_top;
      out.edges.push_back(std::move(edge));
      continue;
    }
    const Point o = origin.at(g);
    std::vector<Point> middle;
    for (const auto& p : path->points) middle.push_back({p.first + o.first, p.second + o.second});
    Point end = path->has_arrow ? Point{path->arrow_tip.first + o.first, path->arrow_tip.second + o.second} : middle.back();
    if (ga != ka) AppendConnector(edge.points, tail_bottom, middle.front());
    if (edge.points.empty()) {
      edge.points = middle;
    } else {
      edge.points.insert(edge.points.end(), middle.begin() + 1, middle.end());
    }
    if (gb == kb) {
      edge.has_arrow = path->has_arrow;
      edge.arrow_tip = end;
    } else {
      // Through the group's boundary down to the node inside.
      const Point last = edge.points.back();
      edge.points.push_back(last);
      edge.points.push_back(end);
      edge.points.push_back(end);
      AppendConnector(edge.points, end, {head_top.first, head_top.second - 6});
      edge.has_arrow = true;
      edge.arrow_tip = head_top;
    }
    out.edges.push_back(std::move(edge));
  }
  out.ok = true;
  out.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace shardscope::views
