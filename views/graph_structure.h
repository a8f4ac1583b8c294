// What the graph view shows of a computation: its name-scope tree (from metadata op_name paths)
// and, for a set of expanded scopes, the visible nodes (instructions and collapsed scope groups),
// clusters and edges handed to the layout. Plain data, no widgets.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ir/ir.h"
#include "views/graph_layout.h"

namespace shardscope::views {

struct ScopeNode {
  std::string label;  // last path component(s) ("layer_0/attention" after chain compression)
  std::string path;   // the full path
  int parent = -1;
  int depth = 0;
  std::vector<int> children;
  std::vector<int64_t> direct;  // instruction ids whose innermost scope this is
  int64_t total = 0;            // instructions in this scope and below
};

class ScopeTree {
 public:
  // Scopes come from Instruction::op_name(): "jit(f)/layer_0/attention/dot_general" puts the
  // instruction in scope "jit(f)/layer_0/attention". A prefix shared by everything is dropped and
  // chains of single-child scopes are merged.
  static ScopeTree Build(const Computation& computation);

  const std::vector<ScopeNode>& scopes() const { return scopes_; }  // [0] is the root
  const ScopeNode& scope(int i) const { return scopes_[static_cast<size_t>(i)]; }
  int scopeOf(int64_t instruction_id) const;  // 0 (root) when unknown
  // True when `ancestor` is `scope` or one of its ancestors.
  bool contains(int ancestor, int scope) const;
  // The instructions under scope `i` (all depths).
  std::vector<int64_t> instructionsUnder(int i) const;
  // Scopes to expand so that about `budget` nodes are visible (breadth first, root always).
  std::set<int> defaultExpansion(int64_t budget) const;
  // Every scope expanded.
  std::set<int> allExpanded() const;

 private:
  std::vector<ScopeNode> scopes_;
  std::unordered_map<int64_t, int> scope_of_;
};

// Visible graph keys: "i<id>" for an instruction, "g<scope>" for a collapsed scope, "c<scope>" for
// a cluster (an expanded scope).
std::string InstructionKey(int64_t id);
std::string GroupKey(int scope);
std::string ClusterKey(int scope);

struct VisibleGraph {
  LayoutInput input;
  std::unordered_map<int64_t, std::string> representative;  // instruction id -> visible node key
  std::unordered_map<std::string, int> group_scope;          // group key -> scope
  std::unordered_map<std::string, int> cluster_scope;        // cluster key -> scope
  std::unordered_map<std::string, int64_t> node_instruction; // node key -> instruction id (-1 for groups)
  std::string signature;                                     // identifies the structure (cache key part)
};

// `size_of(key, instruction id or -1, scope or -1)` gives each node's size.
using NodeSizer = std::function<std::pair<double, double>(const std::string& key, int64_t id, int scope)>;

VisibleGraph BuildVisibleGraph(const Computation& computation, const ScopeTree& tree, const std::set<int>& expanded,
                               const NodeSizer& size_of);

}  // namespace shardscope::views
