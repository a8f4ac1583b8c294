#include "views/graph_structure.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/ir/opcodes.h"

namespace shardscope::views {


namespace {

// The scope path of an op_name: "jit(f)/layer0/ffn/dot" -> {jit(f), layer0, ffn}. A '/' inside
// parentheses (jit(a/b)) does not split.
std::vector<std::string> ScopePath(const Instruction& inst) {
  std::vector<std::string> parts;
  const std::string op = inst.op_name();
  if (op.empty()) return parts;
  size_t start = 0;
  int depth = 0;
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

// Computations shown inside the group of their caller.
bool NestsCallees(const Instruction& inst) {
  if (inst.called_computations().empty()) return false;
  const Opcode op = inst.opcode();
  return op == Opcode::kWhile || op == Opcode::kCall || op == Opcode::kConditional || IsFusion(inst);
}

std::string RoleLabel(const Instruction& caller, size_t k) {
  if (caller.opcode() == Opcode::kWhile) return k == 0 ? "condition" : "body";
  if (caller.opcode() == Opcode::kConditional) return "branch " + std::to_string(k);
  return "computation " + std::to_string(k);
}

// A path component that stands for a caller's group: marker, id, label.
constexpr char kCallMark = '\x01';
std::string CallComponent(const Instruction& caller) {
  return std::string(1, kCallMark) + std::to_string(caller.id()) + kCallMark + caller.name();
}

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}
uint64_t HashText(const std::string& s) { return std::hash<std::string>{}(s); }

// "layer12" and "layer3" alike: digit runs do not count.
std::string WithoutDigits(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

ScopeTree ScopeTree::Build(const Computation& computation, std::shared_ptr<const void> owner) {
  ScopeTree t = Build(computation);
  t.owner_ = std::move(owner);
  return t;
}

ScopeTree ScopeTree::Build(const Computation& computation) {
  ScopeTree t;
  // ---- Which instructions are shown, in which order: nested computations before their caller.
  std::unordered_map<const Computation*, int> callers;
  if (const Module* module = computation.parent()) {
    for (const auto& comp : module->computations())
      for (const auto& inst : comp->instructions())
        for (const Computation* c : inst->called_computations()) ++callers[c];
  }
  struct Context {
    const Instruction* caller = nullptr;
    size_t role = 0;
  };
  std::vector<Context> context;
  std::set<const Computation*> placed{&computation};
  std::function<void(const Computation&, const Instruction*, size_t)> add = [&](const Computation& comp,
                                                                                 const Instruction* caller, size_t role) {
    for (const auto& inst : comp.instructions()) {
      if (NestsCallees(*inst)) {
        bool nest = true;
        for (const Computation* c : inst->called_computations())
          nest = nest && c && callers[c] == 1 && !placed.count(c);
        if (nest) {
          const auto& called = inst->called_computations();
          for (const Computation* c : called) placed.insert(c);
          for (size_t k = 0; k < called.size(); ++k) add(*called[k], inst.get(), k);
        }
      }
      t.position_[inst->id()] = static_cast<int32_t>(t.order_.size());
      t.order_.push_back(inst.get());
      context.push_back({caller, role});
    }
  };
  add(computation, nullptr, 0);
  const size_t n = t.order_.size();
  auto pos = [&](const Instruction* inst) { return t.position_.at(inst->id()); };
  std::vector<char> nests(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (context[i].caller) nests[static_cast<size_t>(pos(context[i].caller))] = 1;
  }

  // ---- Edges: operands, plus caller operand -> nested parameter and nested root -> caller.
  for (size_t i = 0; i < n; ++i) {
    const Instruction* inst = t.order_[i];
    for (const Instruction* op : inst->operands()) {
      auto it = t.position_.find(op->id());
      if (it != t.position_.end()) t.edges_.emplace_back(it->second, static_cast<int32_t>(i));
    }
    if (!nests[i]) continue;
    const auto& called = inst->called_computations();
    for (size_t k = 0; k < called.size(); ++k) {
      const Computation* c = called[k];
      for (const Instruction* p : c->parameters()) {
        // while: the loop state feeds body and condition; conditional: operand k+1 feeds branch
        // k; call and fusion: operand i feeds parameter i.
        int64_t operand = p->parameter_number;
        if (inst->opcode() == Opcode::kWhile) operand = 0;
        if (inst->opcode() == Opcode::kConditional) operand = static_cast<int64_t>(k) + 1;
        if (operand >= 0 && operand < inst->operand_count())
          t.edges_.emplace_back(pos(inst->operand(operand)), pos(p));
      }
      if (c->root()) t.edges_.emplace_back(pos(c->root()), static_cast<int32_t>(i));
    }
  }

  // ---- Paths.
  std::vector<std::vector<std::string>> own(n);
  int64_t ops = 0, scoped = 0;
  for (size_t i = 0; i < n; ++i) {
    own[i] = ScopePath(*t.order_[i]);
    if (!context[i].caller && !t.order_[i]->operands().empty()) {
      ++ops;
      if (!own[i].empty()) ++scoped;
    }
  }
  t.from_metadata_ = scoped > 0 && 2 * scoped >= ops;
  if (!t.from_metadata_) {
    for (auto& p : own) p.clear();
  }
  // Leaves without a scope (weights, constants) join their first user's scope.
  for (size_t i = 0; i < n; ++i) {
    const Instruction* inst = t.order_[i];
    if (!own[i].empty() || !inst->operands().empty() || inst->users().empty()) continue;
    int32_t first = -1;
    for (const Instruction* user : inst->users()) {
      auto it = t.position_.find(user->id());
      if (it != t.position_.end() && (first < 0 || it->second < first)) first = it->second;
    }
    if (first >= 0) own[i] = own[static_cast<size_t>(first)];
  }
  // A get-tuple-element without a scope of its own reads one element of a tuple: it goes where
  // that element was made. (A partitioned program reads each output of the original root tuple
  // this way, one get-tuple-element per output: left in the outermost group they would crowd it
  // into chunks.) In order, so a chain of tuples resolves.
  for (size_t i = 0; i < n; ++i) {
    const Instruction* inst = t.order_[i];
    if (!own[i].empty() || inst->opcode() != Opcode::kGetTupleElement || inst->operand_count() != 1) continue;
    const Instruction* tuple = inst->operand(0);
    if (tuple->opcode() != Opcode::kTuple || inst->tuple_index < 0 || inst->tuple_index >= tuple->operand_count())
      continue;
    auto it = t.position_.find(tuple->operand(inst->tuple_index)->id());
    if (it != t.position_.end()) own[i] = own[static_cast<size_t>(it->second)];
  }
  // Nested instructions: below their caller's group, then their own path without the part it
  // shares with the caller's. Callers come after their callees, so go backwards.
  std::vector<std::vector<std::string>> path(n);
  for (size_t i = n; i-- > 0;) {
    const Context& cx = context[i];
    std::vector<std::string> p;
    if (cx.caller) {
      const size_t k = static_cast<size_t>(pos(cx.caller));
      p = path[k];  // ends with the caller's own group
      if (cx.caller->called_computations().size() > 1) p.push_back(RoleLabel(*cx.caller, cx.role));
      size_t common = 0;
      while (common < own[i].size() && common < own[k].size() && own[i][common] == own[k][common]) ++common;
      p.insert(p.end(), own[i].begin() + static_cast<std::ptrdiff_t>(common), own[i].end());
    } else {
      p = own[i];
    }
    if (nests[i]) p.push_back(CallComponent(*t.order_[i]));
    path[i] = std::move(p);
  }

  // ---- A trie of the paths.
  struct Raw {
    std::string name;
    int parent = -1;
    std::map<std::string, int> children;
    std::vector<int64_t> direct;
    int32_t first = INT32_MAX;
  };
  std::vector<Raw> raw(1);
  for (size_t i = 0; i < n; ++i) {
    int cur = 0;
    raw[0].first = std::min(raw[0].first, static_cast<int32_t>(i));
    for (const auto& part : path[i]) {
      auto it = raw[static_cast<size_t>(cur)].children.find(part);
      if (it == raw[static_cast<size_t>(cur)].children.end()) {
        raw.push_back({part, cur, {}, {}, INT32_MAX});
        const int idx = static_cast<int>(raw.size()) - 1;
        raw[static_cast<size_t>(cur)].children.emplace(part, idx);
        cur = idx;
      } else {
        cur = it->second;
      }
      raw[static_cast<size_t>(cur)].first = std::min(raw[static_cast<size_t>(cur)].first, static_cast<int32_t>(i));
    }
    raw[static_cast<size_t>(cur)].direct.push_back(t.order_[i]->id());
  }
  auto is_call = [](const std::string& name) { return !name.empty() && name[0] == kCallMark; };
  // Drop a prefix shared by everything (never a caller's group).
  int top = 0;
  while (raw[static_cast<size_t>(top)].direct.empty() && raw[static_cast<size_t>(top)].children.size() == 1 &&
         !is_call(raw[static_cast<size_t>(top)].children.begin()->first)) {
    top = raw[static_cast<size_t>(top)].children.begin()->second;
  }
  t.scopes_.push_back(ScopeNode{});
  t.scopes_[0].kind = ScopeNode::Kind::kRoot;
  // Copy, merging chains of single-child scopes that hold no instructions; children in order of
  // first appearance.
  std::function<void(int, int)> copy = [&](int raw_index, int out_index) {
    std::vector<int> kids;
    for (const auto& [name, child] : raw[static_cast<size_t>(raw_index)].children) kids.push_back(child);
    std::sort(kids.begin(), kids.end(),
              [&](int a, int b) { return raw[static_cast<size_t>(a)].first < raw[static_cast<size_t>(b)].first; });
    for (int child : kids) {
      int c = child;
      ScopeNode node;
      const std::string& name = raw[static_cast<size_t>(c)].name;
      if (is_call(name)) {
        const size_t mark = name.find(kCallMark, 1);
        node.kind = ScopeNode::Kind::kCall;
        node.caller = std::stoll(name.substr(1, mark - 1));
        node.label = name.substr(mark + 1);
      } else {
        node.label = name;
        while (raw[static_cast<size_t>(c)].direct.empty() && raw[static_cast<size_t>(c)].children.size() == 1 &&
               !is_call(raw[static_cast<size_t>(c)].children.begin()->first)) {
          c = raw[static_cast<size_t>(c)].children.begin()->second;
          node.label += "/" + raw[static_cast<size_t>(c)].name;
        }
      }
      node.parent = out_index;
      node.direct = raw[static_cast<size_t>(c)].direct;
      t.scopes_.push_back(node);
      const int idx = static_cast<int>(t.scopes_.size()) - 1;
      t.scopes_[static_cast<size_t>(out_index)].children.push_back(idx);
      copy(c, idx);
    }
  };
  t.scopes_[0].direct = raw[static_cast<size_t>(top)].direct;
  copy(top, 0);

  // ---- Chunks where a scope would show too many items.
  t.scope_at_.assign(n, 0);
  for (size_t s = 0; s < t.scopes_.size(); ++s)
    for (int64_t id : t.scopes_[s].direct) t.scope_at_[static_cast<size_t>(t.position_.at(id))] = static_cast<int32_t>(s);
  // Signatures and repeat runs first: a run is never split into chunks.
  t.Finish();
  const size_t named = t.scopes_.size();
  for (size_t s = 0; s < t.scopes_.size(); ++s) t.Chunk(static_cast<int>(s));  // appends chunks, visited too
  if (t.scopes_.size() == named) return t;
  t.Finish();
  return t;
}

void ScopeTree::Chunk(int s) {
  struct ItemRef {
    int32_t first;
    int64_t id;               // instruction id, or -1
    std::vector<int> scopes;  // child scopes: one, or a whole repeat run
  };
  std::vector<ItemRef> items;
  {
    const ScopeNode& node = scopes_[static_cast<size_t>(s)];
    for (int64_t id : node.direct) items.push_back({position_.at(id), id, {}});
    int last_run = -1;
    for (int c : node.children) {
      const int run = scopes_[static_cast<size_t>(c)].run;
      if (run >= 0 && run == last_run) {
        items.back().scopes.push_back(c);
        continue;
      }
      last_run = run;
      items.push_back({scopes_[static_cast<size_t>(c)].first, -1, {c}});
    }
    if (static_cast<int>(items.size()) <= kMaxItems) return;
  }
  std::sort(items.begin(), items.end(), [](const ItemRef& a, const ItemRef& b) { return a.first < b.first; });
  constexpr size_t kTarget = 40;
  const size_t count = std::min<size_t>(kMaxItems, (items.size() + kTarget - 1) / kTarget);
  const size_t size = (items.size() + count - 1) / count;
  scopes_[static_cast<size_t>(s)].direct.clear();
  scopes_[static_cast<size_t>(s)].children.clear();
  for (size_t begin = 0; begin < items.size(); begin += size) {
    const size_t end = std::min(items.size(), begin + size);
    ScopeNode chunk;
    chunk.kind = ScopeNode::Kind::kChunk;
    chunk.parent = s;
    chunk.first = items[begin].first;
    const int idx = static_cast<int>(scopes_.size());
    auto name_at = [&](const ItemRef& r, bool last) -> std::string {
      if (r.id >= 0) return order_[static_cast<size_t>(position_.at(r.id))]->name();
      // A group: its first (or last) instruction.
      int32_t best = last ? -1 : INT32_MAX;
      std::vector<int> stack = r.scopes;
      while (!stack.empty()) {
        const int y = stack.back();
        stack.pop_back();
        for (int64_t id : scopes_[static_cast<size_t>(y)].direct) {
          const int32_t p = position_.at(id);
          best = last ? std::max(best, p) : std::min(best, p);
        }
        for (int c : scopes_[static_cast<size_t>(y)].children) stack.push_back(c);
      }
      return (best >= 0 && best != INT32_MAX) ? order_[static_cast<size_t>(best)]->name() : std::string();
    };
    chunk.label = name_at(items[begin], false) + " \u2026 " + name_at(items[end - 1], true);
    for (size_t k = begin; k < end; ++k) {
      if (items[k].id >= 0) {
        chunk.direct.push_back(items[k].id);
        scope_at_[static_cast<size_t>(position_.at(items[k].id))] = idx;
      }
      for (int c : items[k].scopes) {
        chunk.children.push_back(c);
        scopes_[static_cast<size_t>(c)].parent = idx;
      }
    }
    scopes_.push_back(std::move(chunk));
    scopes_[static_cast<size_t>(s)].children.push_back(idx);
  }
}

void ScopeTree::Finish() {
  // Renumber in pre-order (parents before children, siblings in order).
  std::vector<int> order;
  std::vector<int> stack{0};
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    order.push_back(s);
    const auto& kids = scopes_[static_cast<size_t>(s)].children;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
  std::vector<int> renum(scopes_.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) renum[static_cast<size_t>(order[i])] = static_cast<int>(i);
  std::vector<ScopeNode> out;
  out.reserve(order.size());
  for (int s : order) {
    ScopeNode node = std::move(scopes_[static_cast<size_t>(s)]);
    if (node.parent >= 0) node.parent = renum[static_cast<size_t>(node.parent)];
    for (int& c : node.children) c = renum[static_cast<size_t>(c)];
    out.push_back(std::move(node));
  }
  scopes_ = std::move(out);
  for (auto& s : scope_at_) s = renum[static_cast<size_t>(s)];

  // Depths, paths, totals, first positions.
  std::vector<int32_t> first_any(scopes_.size(), INT32_MAX);
  for (size_t i = 0; i < scopes_.size(); ++i) {
    ScopeNode& node = scopes_[i];
    std::vector<std::pair<int32_t, int64_t>> keyed;
    keyed.reserve(node.direct.size());
    for (int64_t id : node.direct) keyed.emplace_back(position_.at(id), id);
    std::sort(keyed.begin(), keyed.end());
    for (size_t k = 0; k < keyed.size(); ++k) node.direct[k] = keyed[k].second;
    node.total = static_cast<int64_t>(node.direct.size());
    // Ordered by the first operation: the optimizer's state parameters come early in the module
    // but the optimizer's updates come last.
    node.first = INT32_MAX;
    first_any[i] = keyed.empty() ? INT32_MAX : keyed.front().first;
    for (const auto& [position, id] : keyed) {
      if (order_[static_cast<size_t>(position)]->opcode() != Opcode::kParameter) {
        node.first = position;
        break;
      }
    }
    if (node.parent >= 0) {
      const ScopeNode& p = scopes_[static_cast<size_t>(node.parent)];
      node.depth = p.depth + 1;
      node.path = p.path.empty() ? node.label : p.path + "/" + node.label;
    }
  }
  for (size_t i = scopes_.size(); i-- > 1;) {
    ScopeNode& node = scopes_[i];
    ScopeNode& p = scopes_[static_cast<size_t>(node.parent)];
    p.total += node.total;
    p.first = std::min(p.first, node.first);
    first_any[static_cast<size_t>(node.parent)] = std::min(first_any[static_cast<size_t>(node.parent)], first_any[i]);
  }
  for (size_t i = 0; i < scopes_.size(); ++i) {
    if (scopes_[i].first == INT32_MAX) scopes_[i].first = first_any[i];  // parameters only
  }
  for (auto& node : scopes_) {
    std::sort(node.children.begin(), node.children.end(),
              [&](int a, int b) { return scopes_[static_cast<size_t>(a)].first < scopes_[static_cast<size_t>(b)].first; });
  }

  // The instructions below each scope, in order.
  under_.assign(scopes_.size(), {});
  for (size_t p = 0; p < order_.size(); ++p) {
    for (int s = scope_at_[p]; s >= 0; s = scopes_[static_cast<size_t>(s)].parent)
      under_[static_cast<size_t>(s)].push_back(static_cast<int32_t>(p));
  }

  // The edges between each scope's items.
  slot_edges_.assign(scopes_.size(), {});
  {
    struct PairHash {
      size_t operator()(const std::pair<int64_t, int64_t>& p) const {
        return static_cast<size_t>(Mix(static_cast<uint64_t>(p.first), static_cast<uint64_t>(p.second)));
      }
    };
    std::vector<std::unordered_map<std::pair<int64_t, int64_t>, size_t, PairHash>> index(scopes_.size());
    for (const auto& [tp, hp] : edges_) {
      const int st = scope_at_[static_cast<size_t>(tp)], sh = scope_at_[static_cast<size_t>(hp)];
      const int g = commonAncestor(st, sh);
      const int64_t a = st == g ? order_[static_cast<size_t>(tp)]->id() : ScopeSlot(childOnPath(g, st));
      const int64_t b = sh == g ? order_[static_cast<size_t>(hp)]->id() : ScopeSlot(childOnPath(g, sh));
      if (a == b) continue;
      auto& list = slot_edges_[static_cast<size_t>(g)];
      auto [it, inserted] = index[static_cast<size_t>(g)].emplace(std::make_pair(a, b), list.size());
      if (inserted) list.push_back({a, b, 0});
      ++list[it->second].count;
    }
  }

  // Signatures, children first: every operation below in order with its opcode, shape and where
  // its operands come from (an index below the scope, or "outside or a parameter"), and the child
  // groups' own signatures with their labels (digits ignored).
  std::vector<int32_t> local(order_.size(), -1), stamp(order_.size(), -1);
  for (size_t i = scopes_.size(); i-- > 0;) {
    ScopeNode& node = scopes_[i];
    const std::vector<int32_t>& positions = under_[i];
    int32_t k = 0;  // operations only
    for (int32_t p : positions) {
      if (order_[static_cast<size_t>(p)]->opcode() == Opcode::kParameter) continue;
      local[static_cast<size_t>(p)] = k++;
      stamp[static_cast<size_t>(p)] = static_cast<int32_t>(i);
    }
    uint64_t h = Mix(HashText(WithoutDigits(node.label)), static_cast<uint64_t>(node.kind));
    for (int32_t p : positions) {
      const Instruction* inst = order_[static_cast<size_t>(p)];
      // Parameters are inputs, not operations: the first layer holding the model's input too is
      // still a layer like the others.
      if (inst->opcode() == Opcode::kParameter) continue;
      h = Mix(h, HashText(inst->opcode_text()));
      h = Mix(h, static_cast<uint64_t>(inst->shape().type));
      for (int64_t d : inst->shape().dims) h = Mix(h, static_cast<uint64_t>(d));
      h = Mix(h, inst->shape().tuple.size());
      for (const Instruction* op : inst->operands()) {
        auto it = position_.find(op->id());
        const bool inside = it != position_.end() && stamp[static_cast<size_t>(it->second)] == static_cast<int32_t>(i);
        h = Mix(h, inside ? static_cast<uint64_t>(local[static_cast<size_t>(it->second)]) + 1 : 0);
      }
      // How deep below it sits, so the grouping inside counts too.
      const int s = scope_at_[static_cast<size_t>(p)];
      h = Mix(h, static_cast<uint64_t>(scopes_[static_cast<size_t>(s)].depth - node.depth));
    }
    for (int c : node.children) h = Mix(h, scopes_[static_cast<size_t>(c)].signature);
    node.signature = h;
  }

  // The fingerprint: every instruction with its group, and every edge.
  uint64_t f = Mix(order_.size(), scopes_.size());
  for (size_t p = 0; p < order_.size(); ++p) {
    const Instruction* inst = order_[p];
    f = Mix(f, static_cast<uint64_t>(inst->id()));
    f = Mix(f, HashText(inst->name()));
    f = Mix(f, static_cast<uint64_t>(scope_at_[p]));
    for (int64_t d : inst->shape().dims) f = Mix(f, static_cast<uint64_t>(d));
  }
  for (const auto& [a, b] : edges_) f = Mix(f, (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
  for (const auto& s : scopes_) f = Mix(f, HashText(s.label));
  fingerprint_ = f;

  // Repeat runs: consecutive named siblings with one signature.
  runs_.clear();
  for (size_t p = 0; p < scopes_.size(); ++p) {
    const auto& kids = scopes_[p].children;
    for (size_t a = 0; a < kids.size();) {
      size_t b = a + 1;
      const ScopeNode& first = scopes_[static_cast<size_t>(kids[a])];
      while (b < kids.size() && first.kind == ScopeNode::Kind::kName &&
             scopes_[static_cast<size_t>(kids[b])].kind == ScopeNode::Kind::kName &&
             scopes_[static_cast<size_t>(kids[b])].signature == first.signature)
        ++b;
      if (static_cast<int>(b - a) >= kMinRun) {
        RepeatRun run;
        run.parent = static_cast<int>(p);
        run.members.assign(kids.begin() + static_cast<std::ptrdiff_t>(a), kids.begin() + static_cast<std::ptrdiff_t>(b));
        run.label = first.label + " \u2026 " + scopes_[static_cast<size_t>(kids[b - 1])].label;
        for (int m : run.members) scopes_[static_cast<size_t>(m)].run = static_cast<int>(runs_.size());
        runs_.push_back(std::move(run));
      }
      a = b;
    }
  }
}

int32_t ScopeTree::positionOf(int64_t id) const {
  auto it = position_.find(id);
  return it == position_.end() ? -1 : it->second;
}

int ScopeTree::scopeOf(int64_t id) const {
  const int32_t p = positionOf(id);
  return p < 0 ? 0 : scope_at_[static_cast<size_t>(p)];
}

bool ScopeTree::contains(int ancestor, int scope) const {
  for (int s = scope; s >= 0; s = scopes_[static_cast<size_t>(s)].parent) {
    if (s == ancestor) return true;
  }
  return false;
}

int ScopeTree::commonAncestor(int a, int b) const {
  while (scopes_[static_cast<size_t>(a)].depth > scopes_[static_cast<size_t>(b)].depth) a = scopes_[static_cast<size_t>(a)].parent;
  while (scopes_[static_cast<size_t>(b)].depth > scopes_[static_cast<size_t>(a)].depth) b = scopes_[static_cast<size_t>(b)].parent;
  while (a != b) {
    a = scopes_[static_cast<size_t>(a)].parent;
    b = scopes_[static_cast<size_t>(b)].parent;
  }
  return a;
}

int ScopeTree::childOnPath(int ancestor, int scope) const {
  if (scope == ancestor) return -1;
  for (int s = scope; s >= 0; s = scopes_[static_cast<size_t>(s)].parent) {
    if (scopes_[static_cast<size_t>(s)].parent == ancestor) return s;
  }
  return -1;
}

std::vector<int64_t> ScopeTree::instructionsUnder(int i) const {
  std::vector<int64_t> out;
  const auto& positions = under_[static_cast<size_t>(i)];
  out.reserve(positions.size());
  for (int32_t p : positions) out.push_back(order_[static_cast<size_t>(p)]->id());
  return out;
}

std::set<int> ScopeTree::allExpanded() const {
  std::set<int> all;
  for (size_t i = 0; i < scopes_.size(); ++i) all.insert(static_cast<int>(i));
  return all;
}

std::set<int> ScopeTree::defaultExpansion(int64_t budget) const {
  if (scopes_[0].total <= budget) return allExpanded();
  // Items a scope shows with its repeat runs folded.
  auto items = [&](int s) {
    const ScopeNode& node = scopes_[static_cast<size_t>(s)];
    int64_t count = static_cast<int64_t>(node.direct.size());
    int last_run = -1;
    for (int c : node.children) {
      const int run = scopes_[static_cast<size_t>(c)].run;
      if (run >= 0 && run == last_run) continue;
      last_run = run;
      ++count;
    }
    return count;
  };
  std::set<int> expanded{0};
  int64_t visible = items(0);
  std::vector<int> level{0};
  while (true) {
    std::vector<int> next;
    int64_t grows = 0;
    for (int s : level) {
      for (int c : scopes_[static_cast<size_t>(s)].children) {
        if (scopes_[static_cast<size_t>(c)].run >= 0) continue;  // folded
        next.push_back(c);
        grows += items(c) - 1;
      }
    }
    if (next.empty() || visible + grows > budget) break;
    visible += grows;
    expanded.insert(next.begin(), next.end());
    level = std::move(next);
  }
  return expanded;
}

// ---- keys and the visible tree ------------------------------------------------------------------------

std::string InstructionKey(int64_t id) { return "i" + std::to_string(id); }
std::string GroupKey(int scope) { return "g" + std::to_string(scope); }
std::string FoldKey(int run) { return "f" + std::to_string(run); }
std::string ClusterKey(int scope) { return "c" + std::to_string(scope); }

std::string VisibleTree::Item::key() const {
  switch (kind) {
    case Kind::kInstruction: return InstructionKey(id);
    case Kind::kGroup: return GroupKey(static_cast<int>(id));
    case Kind::kFold: return FoldKey(static_cast<int>(id));
    case Kind::kOpen: return ClusterKey(static_cast<int>(id));
  }
  return {};
}

VisibleTree::VisibleTree(std::shared_ptr<const ScopeTree> tree, ViewState state)
    : tree_(std::move(tree)), state_(std::move(state)) {
  const auto& scopes = tree_->scopes();
  vis_.resize(scopes.size());
  vis_[0] = {Item::Kind::kOpen, 0};
  for (size_t s = 1; s < scopes.size(); ++s) {  // parents come first
    const ScopeNode& node = scopes[s];
    const Item& parent = vis_[static_cast<size_t>(node.parent)];
    if (parent.kind != Item::Kind::kOpen) {
      vis_[s] = parent;
    } else if (state_.folded(node.run)) {
      vis_[s] = {Item::Kind::kFold, node.run};
    } else if (state_.expanded.count(static_cast<int>(s))) {
      vis_[s] = {Item::Kind::kOpen, static_cast<int64_t>(s)};
    } else {
      vis_[s] = {Item::Kind::kGroup, static_cast<int64_t>(s)};
    }
  }
  for (size_t s = scopes.size(); s-- > 0;) {
    if (vis_[s].kind == Item::Kind::kOpen) open_.push_back(static_cast<int>(s));
  }
}

std::vector<VisibleTree::Item> VisibleTree::items(int scope) const {
  const ScopeNode& node = tree_->scope(scope);
  std::vector<Item> out;
  size_t d = 0, c = 0;
  int last_run = -1;
  while (d < node.direct.size() || c < node.children.size()) {
    const bool take_direct =
        c >= node.children.size() ||
        (d < node.direct.size() && tree_->positionOf(node.direct[d]) < tree_->scope(node.children[c]).first);
    if (take_direct) {
      out.push_back({Item::Kind::kInstruction, node.direct[d++]});
      continue;
    }
    const int child = node.children[c++];
    const Item& v = vis_[static_cast<size_t>(child)];
    if (v.kind == Item::Kind::kFold) {
      if (static_cast<int>(v.id) == last_run) continue;
      last_run = static_cast<int>(v.id);
    }
    out.push_back(v);
  }
  return out;
}

VisibleTree::Item VisibleTree::itemForSlot(int scope, int64_t slot) const {
  (void)scope;
  if (slot >= 0) return {Item::Kind::kInstruction, slot};
  return vis_[static_cast<size_t>(ScopeTree::SlotScope(slot))];
}

VisibleTree::Item VisibleTree::itemFor(int64_t id) const {
  const Item& v = vis_[static_cast<size_t>(tree_->scopeOf(id))];
  if (v.kind == Item::Kind::kOpen) return {Item::Kind::kInstruction, id};
  return v;
}

VisibleTree::Item VisibleTree::itemAt(int32_t position) const {
  const Item& v = vis_[static_cast<size_t>(tree_->scopeAt(position))];
  if (v.kind == Item::Kind::kOpen) return {Item::Kind::kInstruction, tree_->at(position)->id()};
  return v;
}

int VisibleTree::ownerOf(const Item& item) const {
  switch (item.kind) {
    case Item::Kind::kInstruction: return tree_->scopeOf(item.id);
    case Item::Kind::kFold: return tree_->runs()[static_cast<size_t>(item.id)].parent;
    case Item::Kind::kGroup:
    case Item::Kind::kOpen: return tree_->scope(static_cast<int>(item.id)).parent;
  }
  return 0;
}

std::vector<VisibleTree::Item> VisibleTree::visibleNodes() const {
  std::vector<Item> out;
  for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
    for (const Item& item : items(*it))
      if (item.kind != Item::Kind::kOpen) out.push_back(item);
  }
  return out;
}

}  // namespace shardscope::views
