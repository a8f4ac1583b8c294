#include "views/graph_layout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>


#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

namespace shardscope::views {


namespace {

// Graphviz keeps global state: every use goes through this mutex, on the layout worker.
std::mutex& GraphvizMutex() {
  static std::mutex m;
  return m;
}

char* C(const char* s) { return const_cast<char*>(s); }
char* C(const std::string& s) { return const_cast<char*>(s.c_str()); }

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

void CollectClusters(Agraph_t* g, double top, const std::unordered_map<std::string, std::string>& gv_to_key,
                     LayoutResult& out) {
  for (int i = 1; i <= GD_n_cluster(g); ++i) {
    Agraph_t* sub = GD_clust(g)[i];
    const boxf bb = GD_bb(sub);
    auto it = gv_to_key.find(agnameof(sub));
    if (it != gv_to_key.end()) {
      out.clusters[it->second] = {bb.LL.x, top - bb.UR.y, bb.UR.x - bb.LL.x, bb.UR.y - bb.LL.y};
    }
    CollectClusters(sub, top, gv_to_key, out);
  }
}

}  // namespace

LayoutResult LayoutWithGraphviz(const LayoutInput& input) {
  const auto t0 = std::chrono::steady_clock::now();
  LayoutResult out;
  out.engine = "dot";
  std::lock_guard<std::mutex> lock(GraphvizMutex());

  static GVC_t* gvc = gvContext();  // one context for the process, created on the worker
  if (!gvc) {
    out.error = "Graphviz: cannot create a context";
    return out;
  }
  agseterr(AGMAX);  // keep warnings off stderr; failures are reported through the result
  Agraph_t* g = agopen(C("g"), Agdirected, nullptr);
  agattr(g, AGRAPH, C("rankdir"), C("TB"));
  agattr(g, AGRAPH, C("nodesep"), C("0.25"));
  agattr(g, AGRAPH, C("ranksep"), C("0.45"));
  agattr(g, AGRAPH, C("newrank"), C("true"));
  agattr(g, AGRAPH, C("labeljust"), C("l"));
  agattr(g, AGRAPH, C("label"), C(""));
  agattr(g, AGRAPH, C("fontsize"), C("11"));
  agattr(g, AGRAPH, C("margin"), C("8"));
  agattr(g, AGNODE, C("shape"), C("box"));
  agattr(g, AGNODE, C("fixedsize"), C("true"));
  agattr(g, AGNODE, C("label"), C(""));
  agattr(g, AGNODE, C("width"), C("1"));
  agattr(g, AGNODE, C("height"), C("0.5"));
  agattr(g, AGEDGE, C("arrowsize"), C("0.6"));

  // Clusters, parents first (the input lists them in any order).
  std::unordered_map<std::string, Agraph_t*> clusters;
  std::unordered_map<std::string, std::string> gv_to_key;
  std::unordered_map<std::string, const LayoutInputCluster*> cluster_by_key;
  for (const auto& c : input.clusters) cluster_by_key[c.key] = &c;
  std::function<Agraph_t*(const std::string&)> make_cluster = [&](const std::string& key) -> Agraph_t* {
    if (key.empty()) return g;
    auto it = clusters.find(key);
    if (it != clusters.end()) return it->second;
    auto c = cluster_by_key.find(key);
    if (c == cluster_by_key.end()) return g;
    Agraph_t* parent = make_cluster(c->second->parent);
    const std::string gv_name = "cluster_" + std::to_string(clusters.size());
    Agraph_t* sub = agsubg(parent, C(gv_name), 1);
    agsafeset(sub, C("label"), C(c->second->label), C(""));
    agsafeset(sub, C("margin"), C("10"), C(""));
    clusters[key] = sub;
    gv_to_key[gv_name] = key;
    return sub;
  };
  for (const auto& c : input.clusters) make_cluster(c.key);

  std::unordered_map<std::string, Agnode_t*> nodes;
  std::unordered_map<Agnode_t*, std::string> node_key;
  int counter = 0;
  for (const auto& n : input.nodes) {
    const std::string gv_name = "n" + std::to_string(counter++);
    Agnode_t* node = agnode(g, C(gv_name), 1);
    agsafeset(node, C("width"), C(Num(n.width / 72.0)), C("1"));
    agsafeset(node, C("height"), C(Num(n.height / 72.0)), C("0.5"));
    if (!n.cluster.empty()) {
      auto c = clusters.find(n.cluster);
      if (c != clusters.end()) agsubnode(c->second, node, 1);
    }
    nodes[n.key] = node;
    node_key[node] = n.key;
  }
  std::vector<std::pair<Agedge_t*, size_t>> edges;
  for (size_t i = 0; i < input.edges.size(); ++i) {
    const auto& e = input.edges[i];
    auto t = nodes.find(e.tail), h = nodes.find(e.head);
    if (t == nodes.end() || h == nodes.end() || t->second == h->second) continue;
    Agedge_t* edge = agedge(g, t->second, h->second, nullptr, 1);
    edges.emplace_back(edge, i);
  }

  if (gvLayout(gvc, g, "dot") != 0) {
    out.error = "Graphviz dot layout failed";
    agclose(g);
    return out;
  }
  const boxf bb = GD_bb(g);
  const double top = bb.UR.y;
  out.width = bb.UR.x - bb.LL.x;
  out.height = bb.UR.y - bb.LL.y;
  for (const auto& [node, key] : node_key) {
    const pointf c = ND_coord(node);
    const double w = ND_width(node) * 72.0, h = ND_height(node) * 72.0;
    out.nodes[key] = {c.x - w / 2, top - c.y - h / 2, w, h};
  }
  for (const auto& [edge, index] : edges) {
    const splines* spl = ED_spl(edge);
    if (!spl || spl->size == 0) continue;
    LayoutEdgePath path;
    path.tail = input.edges[index].tail;
    path.head = input.edges[index].head;
    const bezier& bz = spl->list[0];
    for (int k = 0; k < bz.size; ++k) path.points.emplace_back(bz.list[k].x, top - bz.list[k].y);
    if (bz.eflag) {
      path.has_arrow = true;
      path.arrow_tip = {bz.ep.x, top - bz.ep.y};
    }
    out.edges.push_back(std::move(path));
  }
  CollectClusters(g, top, gv_to_key, out);
  gvFreeLayout(gvc, g);
  agclose(g);
  out.ok = true;
  out.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

LayoutResult LayoutLayered(const LayoutInput& input) {
  const auto t0 = std::chrono::steady_clock::now();
  LayoutResult out;
  out.engine = "layered (fallback)";
  const size_t n = input.nodes.size();
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index[input.nodes[i].key] = i;
  std::vector<std::vector<size_t>> preds(n), succs(n);
  for (const auto& e : input.edges) {
    auto t = index.find(e.tail), h = index.find(e.head);
    if (t == index.end() || h == index.end() || t->second == h->second) continue;
    succs[t->second].push_back(h->second);
    preds[h->second].push_back(t->second);
  }
  // Longest-path ranks (Kahn's order; nodes left in a cycle keep rank 0 + their preds so far).
  std::vector<int> rank(n, 0), indeg(n, 0);
  for (size_t i = 0; i < n; ++i) indeg[i] = static_cast<int>(preds[i].size());
  std::vector<size_t> queue;
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) queue.push_back(i);
  for (size_t q = 0; q < queue.size(); ++q) {
    size_t u = queue[q];
    for (size_t v : succs[u]) {
      rank[v] = std::max(rank[v], rank[u] + 1);
      if (--indeg[v] == 0) queue.push_back(v);
    }
  }
  int max_rank = 0;
  for (int r : rank) max_rank = std::max(max_rank, r);
  std::vector<std::vector<size_t>> layers(static_cast<size_t>(max_rank) + 1);
  for (size_t i = 0; i < n; ++i) layers[static_cast<size_t>(rank[i])].push_back(i);
  std::vector<double> pos(n, 0);
  auto renumber = [&] {
    for (auto& layer : layers)
      for (size_t k = 0; k < layer.size(); ++k) pos[layer[k]] = static_cast<double>(k);
  };
  renumber();
  for (int sweep = 0; sweep < 6; ++sweep) {
    const bool down = sweep % 2 == 0;
    for (size_t li = 0; li < layers.size(); ++li) {
      auto& layer = layers[down ? li : layers.size() - 1 - li];
      std::vector<std::pair<double, size_t>> keyed;
      for (size_t v : layer) {
        const auto& nb = down ? preds[v] : succs[v];
        double bc = pos[v];
        if (!nb.empty()) {
          bc = 0;
          for (size_t u : nb) bc += pos[u];
          bc /= static_cast<double>(nb.size());
        }
        keyed.emplace_back(bc, v);
      }
      std::stable_sort(keyed.begin(), keyed.end(), [](auto& a, auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < keyed.size(); ++k) layer[k] = keyed[k].second;
      for (size_t k = 0; k < layer.size(); ++k) pos[layer[k]] = static_cast<double>(k);
    }
  }
  const double hgap = 24, vgap = 46;
  double y = 10, width = 0;
  std::vector<double> layer_width(layers.size(), 0);
  for (size_t li = 0; li < layers.size(); ++li) {
    for (size_t v : layers[li]) layer_width[li] += input.nodes[v].width + hgap;
    width = std::max(width, layer_width[li]);
  }
  for (size_t li = 0; li < layers.size(); ++li) {
    double x = 10 + (width - layer_width[li]) / 2, h = 0;
    for (size_t v : layers[li]) {
      const auto& node = input.nodes[v];
      out.nodes[node.key] = {x, y, node.width, node.height};
      x += node.width + hgap;
      h = std::max(h, node.height);
    }
    y += h + vgap;
  }
  // Clusters: boxes around their members (nested clusters included).
  std::map<std::string, std::vector<std::string>> members;
  std::unordered_map<std::string, std::string> parent;
  for (const auto& c : input.clusters) parent[c.key] = c.parent;
  for (const auto& node : input.nodes) {
    for (std::string c = node.cluster; !c.empty(); c = parent.count(c) ? parent[c] : "") members[c].push_back(node.key);
  }
  for (const auto& [key, keys] : members) {
    double x0 = 1e18, y0 = 1e18, x1 = -1e18, y1 = -1e18;
    for (const auto& k : keys) {
      const auto& b = out.nodes[k];
      x0 = std::min(x0, b.x), y0 = std::min(y0, b.y);
      x1 = std::max(x1, b.x + b.w), y1 = std::max(y1, b.y + b.h);
    }
    out.clusters[key] = {x0 - 8, y0 - 20, x1 - x0 + 16, y1 - y0 + 28};
  }
  for (const auto& e : input.edges) {
    auto t = out.nodes.find(e.tail), h = out.nodes.find(e.head);
    if (t == out.nodes.end() || h == out.nodes.end() || e.tail == e.head) continue;
    LayoutEdgePath p;
    p.tail = e.tail;
    p.head = e.head;
    const double x0 = t->second.x + t->second.w / 2, y0 = t->second.y + t->second.h;
    const double x1 = h->second.x + h->second.w / 2, y1 = h->second.y - 6;
    const double dy = (y1 - y0) / 2;
    p.points = {{x0, y0}, {x0, y0 + dy}, {x1, y1 - dy}, {x1, y1}};
    p.has_arrow = true;
    p.arrow_tip = {x1, h->second.y};
    out.edges.push_back(std::move(p));
  }
  out.width = width + 20;
  out.height = y + 10;
  out.ok = true;
  out.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// ---- LayoutCache ---------------------------------------------------------------------------------

LayoutCache& LayoutCache::instance() {
  static LayoutCache* cache = new LayoutCache();  // lives for the process
  return *cache;
}

std::shared_ptr<const LayoutResult> LayoutCache::cached(const std::string& key) const {
  QMutexLocker lock(&mutex_);
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second;
}

int LayoutCache::layoutsRun() const {
  QMutexLocker lock(&mutex_);
  return runs_;
}

void LayoutCache::clearCache() {
  QMutexLocker lock(&mutex_);
  cache_.clear();
  order_.clear();
  order_start_ = 0;
}

std::shared_ptr<const LayoutResult> LayoutCache::layOut(const std::string& key, const LayoutInput& input,
                                                        bool* from_cache) {
  if (from_cache) *from_cache = false;
  if (auto hit = cached(key)) {
    if (from_cache) *from_cache = true;
    return hit;
  }
  LayoutResult result = LayoutWithGraphviz(input);
  if (!result.ok) {
    const std::string why = result.error;
    result = LayoutLayered(input);
    result.error = why;
  }
  auto shared = std::make_shared<const LayoutResult>(std::move(result));
  constexpr size_t kCapacity = 4096;  // group layouts (a few kB each)
  QMutexLocker lock(&mutex_);
  ++runs_;
  if (cache_.emplace(key, shared).second) order_.push_back(key);
  while (cache_.size() > kCapacity && order_start_ < order_.size()) cache_.erase(order_[order_start_++]);
  if (order_start_ > kCapacity) {
    order_.erase(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(order_start_));
    order_start_ = 0;
  }
  return shared;
}

}  // namespace shardscope::views
