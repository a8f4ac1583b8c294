#include "views/graph_structure.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>

namespace shardscope::views {


namespace {

std::vector<std::string> ScopePath(const Instruction& inst) {
  std::vector<std::string> parts;
  const std::string op = inst.op_name();
  if (op.empty()) return parts;
  size_t start = 0;
  int depth = 0;  // '/' inside parentheses (jit(a/b)) does not split
  for (size_t i = 0; i <= op.size(); ++i) {
    if (i < op.size() && op[i] == '(') ++depth;
    if (i < op.size() && op[i] == ')') depth = std::max(0, depth - 1);
    if (i == op.size() || (op[i] == '/' && depth == 0)) {
      if (i > start) parts.push_back(op.substr(start, i - start));
      start = i + 1;
    }
  }
  if (!parts.empty()) parts.pop_back();  // the op itself
  return parts;
}

}  // namespace

ScopeTree ScopeTree::Build(const Computation& computation) {
  // A trie of raw paths first.
  struct Raw {
    std::string name;
    int parent = -1;
    std::map<std::string, int> children;
    std::vector<int64_t> direct;
  };
  std::vector<Raw> raw(1);
  // Paths; inputs without a scope of their own (parameters, constants, iotas with no op_name) join
  // the scope their users share, so a layer's weights sit with the layer instead of all being
  // drawn at the top of the graph with long edges down to their uses.
  std::unordered_map<const Instruction*, std::vector<std::string>> paths;
  for (const auto& inst : computation.instructions()) paths[inst.get()] = ScopePath(*inst);
  for (const auto& inst : computation.instructions()) {
    auto& path = paths[inst.get()];
    if (!path.empty() || !inst->operands().empty() || inst->users().empty()) continue;
    std::optional<std::vector<std::string>> common;
    for (const Instruction* user : inst->users()) {
      auto it = paths.find(user);
      if (it == paths.end()) continue;
      if (!common) {
        common = it->second;
        continue;
      }
      size_t n = 0;
      while (n < common->size() && n < it->second.size() && (*common)[n] == it->second[n]) ++n;
      common->resize(n);
    }
    if (common) path = *common;
  }
  for (const auto& inst : computation.instructions()) {
    int cur = 0;
    for (const auto& part : paths[inst.get()]) {
      auto it = raw[static_cast<size_t>(cur)].children.find(part);
      if (it == raw[static_cast<size_t>(cur)].children.end()) {
        raw.push_back({part, cur, {}, {}});
        const int idx = static_cast<int>(raw.size()) - 1;
        raw[static_cast<size_t>(cur)].children.emplace(part, idx);
        cur = idx;
      } else {
        cur = it->second;
      }
    }
    raw[static_cast<size_t>(cur)].direct.push_back(inst->id());
  }
  // Drop a prefix shared by everything: while the root has no instructions and one child.
  int top = 0;
  while (raw[static_cast<size_t>(top)].direct.empty() && raw[static_cast<size_t>(top)].children.size() == 1) {
    top = raw[static_cast<size_t>(top)].children.begin()->second;
  }
  ScopeTree tree;
  tree.scopes_.push_back(ScopeNode{});
  tree.scopes_[0].label = "";
  // Copy, merging chains of single-child scopes that hold no instructions.
  std::function<void(int, int)> copy = [&](int raw_index, int out_index) {
    for (const auto& [name, child] : raw[static_cast<size_t>(raw_index)].children) {
      int c = child;
      std::string label = name;
      while (raw[static_cast<size_t>(c)].direct.empty() && raw[static_cast<size_t>(c)].children.size() == 1) {
        c = raw[static_cast<size_t>(c)].children.begin()->second;
        label += "/" + raw[static_cast<size_t>(c)].name;
      }
      ScopeNode node;
      node.label = label;
      node.parent = out_index;
      node.depth = tree.scopes_[static_cast<size_t>(out_index)].depth + 1;
      const std::string& parent_path = tree.scopes_[static_cast<size_t>(out_index)].path;
      node.path = parent_path.empty() ? label : parent_path + "/" + label;
      node.direct = raw[static_cast<size_t>(c)].direct;
      tree.scopes_.push_back(node);
      const int idx = static_cast<int>(tree.scopes_.size()) - 1;
      tree.scopes_[static_cast<size_t>(out_index)].children.push_back(idx);
      copy(c, idx);
    }
  };
  tree.scopes_[0].direct = raw[static_cast<size_t>(top)].direct;
  copy(top, 0);
  for (size_t i = 0; i < tree.scopes_.size(); ++i) {
    for (int64_t id : tree.scopes_[i].direct) tree.scope_of_[id] = static_cast<int>(i);
  }
  // Totals, children after parents in index order, so sum backwards.
  for (size_t i = tree.scopes_.size(); i-- > 0;) {
    auto& s = tree.scopes_[i];
    s.total += static_cast<int64_t>(s.direct.size());
    if (s.parent >= 0) tree.scopes_[static_cast<size_t>(s.parent)].total += s.total;
  }
  return tree;
}

int ScopeTree::scopeOf(int64_t id) const {
  auto it = scope_of_.find(id);
  return it == scope_of_.end() ? 0 : it->second;
}

bool ScopeTree::contains(int ancestor, int scope) const {
  for (int s = scope; s >= 0; s = scopes_[static_cast<size_t>(s)].parent) {
    if (s == ancestor) return true;
  }
  return false;
}

std::vector<int64_t> ScopeTree::instructionsUnder(int i) const {
  std::vector<int64_t> out;
  std::vector<int> stack{i};
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    const auto& node = scopes_[static_cast<size_t>(s)];
    out.insert(out.end(), node.direct.begin(), node.direct.end());
    for (int c : node.children) stack.push_back(c);
  }
  return out;
}

std::set<int> ScopeTree::allExpanded() const {
  std::set<int> all;
  for (size_t i = 0; i < scopes_.size(); ++i) all.insert(static_cast<int>(i));
  return all;
}

std::set<int> ScopeTree::defaultExpansion(int64_t budget) const {
  std::set<int> expanded{0};
  if (scopes_[0].total <= budget) return allExpanded();
  int64_t visible = static_cast<int64_t>(scopes_[0].direct.size() + scopes_[0].children.size());
  std::queue<int> frontier;
  for (int c : scopes_[0].children) frontier.push(c);
  while (!frontier.empty()) {
    const int s = frontier.front();
    frontier.pop();
    const auto& node = scopes_[static_cast<size_t>(s)];
    const int64_t grows = static_cast<int64_t>(node.direct.size() + node.children.size()) - 1;
    if (visible + grows > budget) continue;
    visible += grows;
    expanded.insert(s);
    for (int c : node.children) frontier.push(c);
  }
  return expanded;
}

std::string InstructionKey(int64_t id) { return "i" + std::to_string(id); }
std::string GroupKey(int scope) { return "g" + std::to_string(scope); }
std::string ClusterKey(int scope) { return "c" + std::to_string(scope); }

VisibleGraph BuildVisibleGraph(const Computation& computation, const ScopeTree& tree, const std::set<int>& expanded,
                               const NodeSizer& size_of) {
  VisibleGraph g;
  // The node that stands for scope s's contents: the outermost collapsed scope on its path.
  auto collapsed_ancestor = [&](int s) -> int {
    std::vector<int> path;
    for (int x = s; x > 0; x = tree.scope(x).parent) path.push_back(x);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      if (!expanded.count(*it)) return *it;
    }
    return -1;
  };
  // The cluster a visible node sits in: its nearest expanded non-root scope with 2+ instructions.
  auto cluster_of = [&](int s) -> std::string {
    for (int x = s; x > 0; x = tree.scope(x).parent) {
      if (expanded.count(x) && tree.scope(x).total >= 2) return ClusterKey(x);
    }
    return "";
  };
  std::set<int> used_clusters;
  auto note_cluster = [&](const std::string& key) {
    if (key.empty()) return;
    used_clusters.insert(std::stoi(key.substr(1)));
  };
  for (const auto& inst : computation.instructions()) {
    const int s = tree.scopeOf(inst->id());
    const int collapsed = collapsed_ancestor(s);
    if (collapsed >= 0) {
      const std::string key = GroupKey(collapsed);
      g.representative[inst->id()] = key;
      if (!g.group_scope.count(key)) {
        g.group_scope[key] = collapsed;
        g.node_instruction[key] = -1;
        auto [w, h] = size_of(key, -1, collapsed);
        const std::string cluster = cluster_of(tree.scope(collapsed).parent);
        note_cluster(cluster);
        g.input.nodes.push_back({key, w, h, cluster});
      }
      continue;
    }
    const std::string key = InstructionKey(inst->id());
    g.representative[inst->id()] = key;
    g.node_instruction[key] = inst->id();
    auto [w, h] = size_of(key, inst->id(), -1);
    const std::string cluster = cluster_of(s);
    note_cluster(cluster);
    g.input.nodes.push_back({key, w, h, cluster});
  }
  // Clusters used, with their ancestors (a cluster may hold only sub-clusters).
  std::set<int> clusters;
  for (int c : used_clusters) {
    for (int x = c; x > 0; x = tree.scope(x).parent) {
      if (expanded.count(x) && tree.scope(x).total >= 2) clusters.insert(x);
    }
  }
  for (int c : clusters) {
    std::string parent;
    for (int x = tree.scope(c).parent; x > 0; x = tree.scope(x).parent) {
      if (clusters.count(x)) {
        parent = ClusterKey(x);
        break;
      }
    }
    g.input.clusters.push_back({ClusterKey(c), parent, tree.scope(c).label});
    g.cluster_scope[ClusterKey(c)] = c;
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& inst : computation.instructions()) {
    const std::string& head = g.representative[inst->id()];
    for (const Instruction* op : inst->operands()) {
      auto t = g.representative.find(op->id());
      if (t == g.representative.end() || t->second == head) continue;
      if (seen.insert({t->second, head}).second) g.input.edges.push_back({t->second, head});
    }
  }
  // Signature: which scopes are expanded (sizes are the caller's part of the key).
  g.signature = computation.name() + "|";
  for (int s : expanded) g.signature += std::to_string(s) + ",";
  return g;
}

}  // namespace shardscope::views
