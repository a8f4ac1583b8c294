// What the graph view shows of a computation, as plain data (no widgets, no Graphviz):
//  * ScopeTree: every instruction placed in a tree of groups. The groups come from the name scopes
//    of the metadata (op_name paths); computations called from one place only (while bodies and
//    conditions, conditional branches, calls, fusions) become a group around their caller; scopes
//    that would show too many items at once are split into chunks of the topological order (which
//    is the whole tree of a computation without metadata). Identical sibling groups (same ops,
//    shapes and wiring: 64 Transformer layers) are recognised as repeat runs.
//  * ViewState / VisibleTree: which groups are expanded and which runs are folded, and for every
//    instruction the visible node that stands for it.
// The layout of what is visible is graph_hierarchy.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ir/ir.h"

namespace shardscope::views {

struct ScopeNode {
  enum class Kind { kRoot, kName, kCall, kChunk };
  Kind kind = Kind::kName;
  std::string label;  // last path component(s) ("layer0/attention" after chain compression)
  std::string path;   // the full path from the root
  int parent = -1;
  int depth = 0;
  std::vector<int> children;    // in order of first appearance
  std::vector<int64_t> direct;  // instruction ids whose innermost scope this is, in order
  int64_t total = 0;            // instructions in this scope and below
  int32_t first = 0;            // position (ScopeTree::positionOf) of the first operation below (parameter
                                // when it holds nothing else): the order of siblings
  int64_t caller = -1;          // kCall: the instruction whose computations this group holds
  uint64_t signature = 0;       // structure below: ops, shapes, wiring, nested groups
  int run = -1;                 // the repeat run this scope belongs to, -1 for none
};

// Consecutive siblings with one signature (at least kMinRun of them): "layer0 … layer63".
struct RepeatRun {
  int parent = -1;
  std::vector<int> members;
  std::string label;  // "layer0 … layer63"
};

class ScopeTree {
 public:
  // A scope shows at most this many items (instructions and child groups) at once; more are
  // split into chunks of the topological order.
  static constexpr int kMaxItems = 60;
  static constexpr int kMinRun = 3;

  // Scopes come from Instruction::op_name(): "jit(f)/layer_0/attention/dot_general" puts the
  // instruction in scope "jit(f)/layer_0/attention". A prefix shared by everything is dropped and
  // chains of single-child scopes are merged. A leaf without a scope of its own (a weight
  // parameter, a constant) joins the scope of its first user; a get-tuple-element without one, the
  // scope of the tuple element it reads. When fewer than half of the
  // computation's operations have a scope, names are ignored and the tree is made of the called
  // computations and chunks only.
  static ScopeTree Build(const Computation& computation);
  // The same, keeping `owner` (the module the computation belongs to) alive as long as the tree:
  // the tree points into the module's instructions and is shared with background layout jobs,
  // which may still run after the document has moved on to another module.
  static ScopeTree Build(const Computation& computation, std::shared_ptr<const void> owner);

  const std::vector<ScopeNode>& scopes() const { return scopes_; }  // [0] is the root
  const ScopeNode& scope(int i) const { return scopes_[static_cast<size_t>(i)]; }
  int scopeOf(int64_t instruction_id) const;  // 0 (root) when unknown
  int scopeAt(int32_t position) const { return scope_at_[static_cast<size_t>(position)]; }
  // True when `ancestor` is `scope` or one of its ancestors.
  bool contains(int ancestor, int scope) const;
  // The deepest scope containing both.
  int commonAncestor(int a, int b) const;
  // The child of `ancestor` on the path down to `scope` (scope itself when it is a child; -1 when
  // `scope` is `ancestor` or not below it).
  int childOnPath(int ancestor, int scope) const;
  // The instructions under scope `i` (all depths), in order.
  std::vector<int64_t> instructionsUnder(int i) const;
  const std::vector<int32_t>& positionsUnder(int i) const { return under_[static_cast<size_t>(i)]; }
  const Instruction* at(int32_t position) const { return order_[static_cast<size_t>(position)]; }
  // Scopes to expand at open: level by level from the root, a whole level at a time, while about
  // `budget` nodes stay visible (folded runs count as one node and are not opened).
  std::set<int> defaultExpansion(int64_t budget) const;
  // Every scope expanded.
  std::set<int> allExpanded() const;
  // True when the groups come from op_name metadata (else: called computations and chunks).
  bool fromMetadata() const { return from_metadata_; }

  // Every instruction shown: the computation's, with those of the computations nested in it
  // placed just before their caller. Positions index this list.
  const std::vector<const Instruction*>& instructions() const { return order_; }
  int32_t positionOf(int64_t id) const;  // -1 when not shown
  // Data flow between shown instructions (tail position, head position): operands, and the edges
  // into and out of nested computations (caller's operand -> parameter, root -> caller).
  const std::vector<std::pair<int32_t, int32_t>>& edges() const { return edges_; }

  // The items of a scope: its direct instructions (slot = id >= 0) and its child groups (slot =
  // -(scope + 1)); the edges between them, one per pair with the number of data edges it stands for.
  struct SlotEdge {
    int64_t tail = 0, head = 0;
    int32_t count = 0;
  };
  const std::vector<SlotEdge>& slotEdges(int scope) const { return slot_edges_[static_cast<size_t>(scope)]; }
  static int64_t ScopeSlot(int scope) { return -(static_cast<int64_t>(scope) + 1); }
  static int SlotScope(int64_t slot) { return static_cast<int>(-slot - 1); }

  const std::vector<RepeatRun>& runs() const { return runs_; }
  // Identifies the graph: instructions (ids, opcodes, shapes), wiring and groups.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  void Chunk(int scope);
  void Finish();  // paths, depths, totals, first positions, scope_of_, slot edges, signatures, runs

  std::vector<ScopeNode> scopes_;
  std::vector<const Instruction*> order_;
  std::unordered_map<int64_t, int32_t> position_;
  std::vector<int32_t> scope_at_;  // by position
  std::vector<std::vector<int32_t>> under_;  // per scope: the positions below it, in order
  std::vector<std::pair<int32_t, int32_t>> edges_;
  std::vector<std::vector<SlotEdge>> slot_edges_;
  std::vector<RepeatRun> runs_;
  bool from_metadata_ = false;
  uint64_t fingerprint_ = 0;
  std::shared_ptr<const void> owner_;  // keeps order_'s instructions alive (may be empty)
};

// Visible node keys: "i<id>" an instruction, "g<scope>" a collapsed group, "f<run>" a folded repeat
// run, "c<scope>" an expanded group (drawn as a frame around its items).
std::string InstructionKey(int64_t id);
std::string GroupKey(int scope);
std::string FoldKey(int run);
std::string ClusterKey(int scope);

// What is open. The root is always expanded.
struct ViewState {
  std::set<int> expanded{0};
  bool fold_repeats = true;  // show each repeat run as one node ...
  std::set<int> unfolded;    // ... except these runs
  bool folded(int run) const { return fold_repeats && run >= 0 && !unfolded.count(run); }
};

// The visible form of a tree in a state.
class VisibleTree {
 public:
  VisibleTree(std::shared_ptr<const ScopeTree> tree, ViewState state);

  struct Item {
    enum class Kind { kInstruction, kGroup, kFold, kOpen };
    Kind kind = Kind::kInstruction;
    int64_t id = 0;  // instruction id, scope (kGroup, kOpen) or run (kFold)
    std::string key() const;
  };
  // Open scopes (expanded, every ancestor open), children before their parents.
  const std::vector<int>& openScopes() const { return open_; }
  bool isOpen(int scope) const { return vis_[static_cast<size_t>(scope)].kind == Item::Kind::kOpen; }
  // The items an open scope shows, in order (a folded run once, where its first member was).
  std::vector<Item> items(int scope) const;
  // The item of open scope `scope` that holds slot `slot` (ScopeTree::SlotEdge).
  Item itemForSlot(int scope, int64_t slot) const;
  // The visible node standing for an instruction (itself, a collapsed group or a folded run).
  Item itemFor(int64_t instruction_id) const;
  std::string keyFor(int64_t instruction_id) const { return itemFor(instruction_id).key(); }
  Item itemAt(int32_t position) const;  // the same by position
  // The open scope whose items include `item` (the scope holding an instruction, a group's parent).
  int ownerOf(const Item& item) const;
  // Visible nodes (not kOpen) in order.
  std::vector<Item> visibleNodes() const;
  const ScopeTree& tree() const { return *tree_; }
  const ViewState& state() const { return state_; }

 private:
  std::shared_ptr<const ScopeTree> tree_;
  ViewState state_;
  std::vector<Item> vis_;  // per scope: kOpen, or the collapsed group / folded run that hides it
  std::vector<int> open_;
};

}  // namespace shardscope::views
