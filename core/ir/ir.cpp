#include "core/ir/ir.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <unordered_set>

namespace shardscope {

// ---- Instruction ----------------------------------------------------------------------------------

bool Instruction::is_root() const { return parent_ && parent_->root() == this; }

void Instruction::ReplaceOperand(int64_t i, Instruction* new_operand) {
  Instruction* old = operands_[static_cast<size_t>(i)];
  if (old == new_operand) return;
  operands_[static_cast<size_t>(i)] = new_operand;
  // Drop one user entry from `old` only if it no longer uses us anywhere.
  if (std::find(operands_.begin(), operands_.end(), old) == operands_.end()) {
    auto& u = old->users_;
    u.erase(std::remove(u.begin(), u.end(), this), u.end());
  }
  if (std::find(new_operand->users_.begin(), new_operand->users_.end(), this) == new_operand->users_.end())
    new_operand->users_.push_back(this);
}

void Instruction::AppendOperand(Instruction* op) {
  operands_.push_back(op);
  if (std::find(op->users_.begin(), op->users_.end(), this) == op->users_.end()) op->users_.push_back(this);
}

void Instruction::ReplaceAllUsesWith(Instruction* other) {
  if (other == this) return;
  std::vector<Instruction*> users = users_;
  for (Instruction* u : users) {
    if (u == other) continue;  // don't create a cycle through the replacement itself
    for (size_t i = 0; i < u->operands_.size(); ++i)
      if (u->operands_[i] == this) u->ReplaceOperand(static_cast<int64_t>(i), other);
  }
  if (parent_ && parent_->root() == this) parent_->set_root(other);
}

std::string Instruction::op_name() const {
  auto pos = metadata.find("op_name=\"");
  if (pos == std::string::npos) return {};
  pos += 9;
  std::string out;
  for (size_t i = pos; i < metadata.size(); ++i) {
    if (metadata[i] == '\\' && i + 1 < metadata.size()) {
      out += metadata[++i];
      continue;
    }
    if (metadata[i] == '"') break;
    out += metadata[i];
  }
  return out;
}

std::vector<int64_t> Instruction::UnspecifiedDims() const {
  std::vector<int64_t> dims;
  auto pos = backend_config.find("unspecified_dims=[");
  if (pos == std::string::npos) return dims;
  pos += 18;
  const char* p = backend_config.data() + pos;
  const char* end = backend_config.data() + backend_config.size();
  while (p < end && *p != ']') {
    while (p < end && (*p == ' ' || *p == ',')) ++p;
    int64_t v = 0;
    auto [q, ec] = std::from_chars(p, end, v);
    if (ec != std::errc()) break;
    dims.push_back(v);
    p = q;
  }
  return dims;
}

// ---- Computation ----------------------------------------------------------------------------------

Instruction* Computation::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

Instruction* Computation::Adopt(std::unique_ptr<Instruction> inst) {
  inst->parent_ = this;
  if (parent_) {
    inst->id_ = parent_->NextId();
    if (inst->name_.empty() || parent_->HasName(inst->name_))
      inst->name_ = parent_->UniqueName(inst->name_.empty() ? std::string(inst->opcode_text_) : inst->name_);
    else
      parent_->RegisterName(inst->name_);
  }
  for (Instruction* op : inst->operands_)
    if (std::find(op->users_.begin(), op->users_.end(), inst.get()) == op->users_.end())
      op->users_.push_back(inst.get());
  Instruction* raw = inst.get();
  if (raw->opcode_ == Opcode::kParameter) {
    size_t n = raw->parameter_number < 0 ? parameters_.size() : static_cast<size_t>(raw->parameter_number);
    if (parameters_.size() <= n) parameters_.resize(n + 1, nullptr);
    parameters_[n] = raw;
  }
  by_name_[raw->name_] = raw;
  instructions_.push_back(std::move(inst));
  return raw;
}

// `new Instruction` default-initialises (every member has its initialiser); make_unique's
// value-initialisation would first zero all 1,776 bytes of the object (docs/search.md).
static std::unique_ptr<Instruction> NewInstruction() { return std::unique_ptr<Instruction>(new Instruction); }

Instruction* Computation::AddInstruction(Opcode op, Shape shape, std::vector<Instruction*> operands,
                                         std::string name) {
  auto inst = NewInstruction();
  inst->opcode_ = op;
  inst->opcode_text_ = std::string(OpcodeName(op));
  inst->shape_ = std::move(shape);
  inst->operands_ = std::move(operands);
  inst->name_ = std::move(name);
  return Adopt(std::move(inst));
}

Instruction* Computation::AddGeneric(std::string opcode_text, Shape shape, std::vector<Instruction*> operands,
                                     std::string name) {
  auto inst = NewInstruction();
  inst->opcode_ = Opcode::kGeneric;
  inst->opcode_text_ = std::move(opcode_text);
  inst->shape_ = std::move(shape);
  inst->operands_ = std::move(operands);
  inst->name_ = std::move(name);
  return Adopt(std::move(inst));
}

Status Computation::RemoveInstruction(Instruction* inst) { return RemoveInstructions({inst}); }

Status Computation::RemoveInstructions(const std::vector<Instruction*>& dead) {
  std::unordered_set<const Instruction*> gone(dead.begin(), dead.end());
  for (Instruction* inst : dead) {
    if (!inst || inst->parent_ != this) return Error("instruction is not in computation " + name_);
    if (inst == root_) return Error("cannot remove " + inst->name_ + ": it is the root");
    for (Instruction* u : inst->users_)
      if (!gone.count(u)) return Error("cannot remove " + inst->name_ + ": it still has users");
  }
  for (Instruction* inst : dead) {
    for (Instruction* op : inst->operands_) {
      if (gone.count(op)) continue;
      auto& u = op->users_;
      u.erase(std::remove(u.begin(), u.end(), inst), u.end());
    }
    if (inst->opcode_ == Opcode::kParameter)
      for (auto& p : parameters_)
        if (p == inst) p = nullptr;
    by_name_.erase(inst->name_);
  }
  for (auto& other : instructions_) {
    if (gone.count(other.get()) || other->control_predecessors.empty()) continue;
    auto& cp = other->control_predecessors;
    cp.erase(std::remove_if(cp.begin(), cp.end(), [&](Instruction* x) { return gone.count(x) != 0; }), cp.end());
  }
  instructions_.erase(std::remove_if(instructions_.begin(), instructions_.end(),
                                     [&](const std::unique_ptr<Instruction>& p) { return gone.count(p.get()) != 0; }),
                      instructions_.end());
  return Status::Ok();
}

void Computation::MoveBefore(Instruction* inst, const Instruction* before) {
  auto find = [&](const Instruction* x) {
    return std::find_if(instructions_.begin(), instructions_.end(),
                        [&](const std::unique_ptr<Instruction>& p) { return p.get() == x; });
  };
  auto from = find(inst);
  if (from == instructions_.end() || inst == before) return;
  std::unique_ptr<Instruction> owned = std::move(*from);
  instructions_.erase(from);
  instructions_.insert(find(before), std::move(owned));
}

namespace {

// Iterative depth-first walk from `start` (graphs can be 100k deep chains) over operands and
// control predecessors: `enter(dep)` says whether to descend into a dependency (and marks it);
// `emit` receives each instruction after everything it depends on.
template <typename Enter, typename Emit>
void PostOrderFrom(Instruction* start, Enter enter, Emit emit) {
  std::vector<std::pair<Instruction*, size_t>> stack;
  stack.emplace_back(start, 0);
  while (!stack.empty()) {
    auto& [inst, next] = stack.back();
    const size_t n_ops = inst->operands().size();
    const size_t n_all = n_ops + inst->control_predecessors.size();
    if (next < n_all) {
      Instruction* dep = next < n_ops ? inst->operands()[next] : inst->control_predecessors[next - n_ops];
      ++next;
      if (dep && enter(dep)) stack.emplace_back(dep, 0);
    } else {
      Instruction* done = inst;
      stack.pop_back();
      emit(done);
    }
  }
}

}  // namespace

std::vector<Instruction*> Computation::MakePostOrder() const {
  std::vector<Instruction*> order;
  order.reserve(instructions_.size());
  std::unordered_set<const Instruction*> visited;
  visited.reserve(instructions_.size() * 2);
  auto visit = [&](Instruction* start) {
    if (!visited.insert(start).second) return;
    PostOrderFrom(
        start, [&](Instruction* dep) { return visited.insert(dep).second; }, [&](Instruction* i) { order.push_back(i); });
  };
  for (const auto& p : parameters_)
    if (p) visit(p);
  if (root_) visit(root_);
  for (const auto& i : instructions_) visit(i.get());
  return order;
}

void Computation::SortInstructionsTopologically() {
  // Keeps the current order where it is already valid: each instruction is placed after its
  // operands (and control predecessors), pulling forward only those defined too late.
  int64_t max_id = -1;
  for (const auto& i : instructions_) max_id = std::max(max_id, i->id_);
  std::vector<uint8_t> state(static_cast<size_t>(max_id + 1), 0);  // 0 new, 1 on the stack, 2 placed
  std::vector<std::unique_ptr<Instruction>*> slot(static_cast<size_t>(max_id + 1), nullptr);
  for (auto& i : instructions_) slot[static_cast<size_t>(i->id_)] = &i;
  std::vector<std::unique_ptr<Instruction>> sorted;
  sorted.reserve(instructions_.size());
  for (auto& start : instructions_) {
    if (!start || state[static_cast<size_t>(start->id_)] == 2) continue;
    state[static_cast<size_t>(start->id_)] = 1;
    PostOrderFrom(
        start.get(),
        [&](Instruction* dep) {
          if (dep->parent_ != this || state[static_cast<size_t>(dep->id_)] != 0) return false;
          state[static_cast<size_t>(dep->id_)] = 1;
          return true;
        },
        [&](Instruction* i) {
          state[static_cast<size_t>(i->id_)] = 2;
          sorted.push_back(std::move(*slot[static_cast<size_t>(i->id_)]));
        });
  }
  instructions_ = std::move(sorted);
}

// ---- Module ------------------------------------------------------------------------------------------

Computation* Module::AddComputation(std::string name, bool is_entry) {
  auto c = std::make_unique<Computation>();
  c->name_ = std::move(name);
  c->parent_ = this;
  Computation* raw = c.get();
  computations_.push_back(std::move(c));
  if (is_entry) entry_ = raw;
  return raw;
}

Computation* Module::FindComputation(std::string_view name) const {
  for (const auto& c : computations_)
    if (c->name() == name) return c.get();
  return nullptr;
}

std::vector<Computation*> Module::MakeComputationPostOrder() const {
  std::vector<Computation*> order;
  std::unordered_set<const Computation*> visited;
  std::function<void(Computation*)> visit = [&](Computation* c) {
    if (!c || visited.count(c)) return;
    visited.insert(c);
    for (const auto& inst : c->instructions())
      for (Computation* callee : inst->called_computations()) visit(callee);
    order.push_back(c);
  };
  for (const auto& c : computations_)
    if (c.get() != entry_) visit(c.get());
  visit(entry_);
  // Keep the entry last even when something else is unreachable.
  if (entry_) {
    order.erase(std::remove(order.begin(), order.end(), entry_), order.end());
    order.push_back(entry_);
  }
  return order;
}

int64_t Module::instruction_count() const {
  int64_t n = 0;
  for (const auto& c : computations_) n += c->instruction_count();
  return n;
}

Instruction* Module::FindInstruction(std::string_view name) const {
  auto slash = name.find('/');
  if (slash != std::string_view::npos) {
    Computation* c = FindComputation(name.substr(0, slash));
    return c ? c->Find(name.substr(slash + 1)) : nullptr;
  }
  if (entry_)
    if (Instruction* i = entry_->Find(name)) return i;
  for (const auto& c : computations_)
    if (Instruction* i = c->Find(name)) return i;
  return nullptr;
}

std::string Module::UniqueName(std::string_view base) {
  std::string b(base);
  // Strip a trailing ".N" so clones of "add.3" become "add.4", not "add.3.1".
  auto dot = b.rfind('.');
  if (dot != std::string::npos && dot + 1 < b.size() &&
      std::all_of(b.begin() + static_cast<long>(dot) + 1, b.end(), [](char c) { return c >= '0' && c <= '9'; }))
    b = b.substr(0, dot);
  if (b.empty()) b = "inst";
  auto it = names_.find(b);
  if (it == names_.end()) {
    names_.emplace(b, 1);
    return b;
  }
  for (int64_t n = it->second;; ++n) {
    std::string cand = b + "." + std::to_string(n);
    if (!names_.count(cand)) {
      it->second = n + 1;
      names_.emplace(cand, 0);
      return cand;
    }
  }
}

std::unique_ptr<Module> Module::Clone() const {
  auto m = std::make_unique<Module>(name_);
  m->num_partitions = num_partitions;
  m->num_replicas = num_replicas;
  m->is_scheduled = is_scheduled;
  m->entry_computation_layout = entry_computation_layout;
  m->header_attributes = header_attributes;
  m->stack_frames = stack_frames;
  m->sdy_meshes = sdy_meshes;
  m->next_id_ = next_id_;
  m->names_ = names_;
  std::unordered_map<const Computation*, Computation*> cmap;
  std::unordered_map<const Instruction*, Instruction*> imap;
  for (const auto& c : computations_) {
    Computation* nc = m->AddComputation(c->name(), c.get() == entry_);
    nc->execution_thread = c->execution_thread;
    nc->raw_attributes = c->raw_attributes;
    cmap[c.get()] = nc;
  }
  for (const auto& c : computations_) {
    Computation* nc = cmap[c.get()];
    for (const auto& inst : c->instructions()) {
      auto copy = std::make_unique<Instruction>(*inst);
      copy->users_.clear();
      copy->parent_ = nc;
      for (auto& op : copy->operands_) op = imap.at(op);
      for (auto& cp : copy->control_predecessors) cp = imap.count(cp) ? imap[cp] : nullptr;
      copy->control_predecessors.erase(
          std::remove(copy->control_predecessors.begin(), copy->control_predecessors.end(), nullptr),
          copy->control_predecessors.end());
      for (auto& callee : copy->called_) callee = cmap.count(callee) ? cmap[callee] : callee;
      Instruction* raw = copy.get();
      for (Instruction* op : raw->operands_)
        if (std::find(op->users_.begin(), op->users_.end(), raw) == op->users_.end()) op->users_.push_back(raw);
      if (raw->opcode_ == Opcode::kParameter && raw->parameter_number >= 0) {
        auto n = static_cast<size_t>(raw->parameter_number);
        if (nc->parameters_.size() <= n) nc->parameters_.resize(n + 1, nullptr);
        nc->parameters_[n] = raw;
      }
      nc->by_name_[raw->name_] = raw;
      nc->instructions_.push_back(std::move(copy));
      imap[inst.get()] = raw;
    }
    if (c->root()) nc->root_ = imap.at(c->root());
  }
  return m;
}

namespace {

// Assigns a container attribute unless both sides are empty (the common case: most attributes are
// empty on most instructions, and passes copy attributes onto new instructions for every op they
// rewrite, so skipping the no-op assignments avoids dozens of out-of-line calls per copy).
template <typename T>
void AssignAttribute(T& to, const T& from) {
  if (from.empty() && to.empty()) return;
  to = from;
}

// The same for an attribute struct whose operator== compares every field (defaulted).
template <typename T>
void AssignDefaultable(T& to, const T& from) {
  static const T kDefault{};
  if (from == kDefault && to == kDefault) return;
  to = from;
}

}  // namespace

void CopyAttributes(const Instruction& o, Instruction* n) {
  n->parameter_number = o.parameter_number;
  n->tuple_index = o.tuple_index;
  n->iota_dimension = o.iota_dimension;
  AssignAttribute(n->dimensions, o.dimensions);
  n->has_dimensions_attr = o.has_dimensions_attr;
  AssignAttribute(n->dynamic_slice_sizes, o.dynamic_slice_sizes);
  AssignAttribute(n->slice.starts, o.slice.starts);
  AssignAttribute(n->slice.limits, o.slice.limits);
  AssignAttribute(n->slice.strides, o.slice.strides);
  AssignAttribute(n->padding, o.padding);
  AssignAttribute(n->dot_dims.lhs_batch, o.dot_dims.lhs_batch);
  AssignAttribute(n->dot_dims.rhs_batch, o.dot_dims.rhs_batch);
  AssignAttribute(n->dot_dims.lhs_contracting, o.dot_dims.lhs_contracting);
  AssignAttribute(n->dot_dims.rhs_contracting, o.dot_dims.rhs_contracting);
  AssignAttribute(n->window.dims, o.window.dims);
  n->has_window = o.has_window;
  AssignDefaultable(n->conv_dims, o.conv_dims);
  n->feature_group_count = o.feature_group_count;
  n->batch_group_count = o.batch_group_count;
  AssignDefaultable(n->gather_dims, o.gather_dims);
  AssignAttribute(n->gather_slice_sizes, o.gather_slice_sizes);
  n->indices_are_sorted = o.indices_are_sorted;
  n->unique_indices = o.unique_indices;
  AssignDefaultable(n->scatter_dims, o.scatter_dims);
  n->comparison = o.comparison;
  AssignAttribute(n->comparison_type, o.comparison_type);
  // (ReplicaGroups' operator== compares the groups only: each field on its own.)
  AssignAttribute(n->replica_groups.groups, o.replica_groups.groups);
  n->replica_groups.iota_form = o.replica_groups.iota_form;
  AssignAttribute(n->replica_groups.iota_dims, o.replica_groups.iota_dims);
  AssignAttribute(n->replica_groups.iota_reshape, o.replica_groups.iota_reshape);
  AssignAttribute(n->replica_groups.iota_perm, o.replica_groups.iota_perm);
  n->has_replica_groups = o.has_replica_groups;
  AssignAttribute(n->source_target_pairs, o.source_target_pairs);
  n->channel_id = o.channel_id;
  n->use_global_device_ids = o.use_global_device_ids;
  n->constrain_layout = o.constrain_layout;
  AssignAttribute(n->custom_call_target, o.custom_call_target);
  n->is_stable = o.is_stable;
  AssignAttribute(n->literal.text, o.literal.text);
  AssignAttribute(n->literal.values, o.literal.values);
  AssignAttribute(n->backend_config, o.backend_config);
  AssignAttribute(n->metadata, o.metadata);
  AssignAttribute(n->frontend_attributes, o.frontend_attributes);
  AssignAttribute(n->raw_attributes, o.raw_attributes);
}

std::string_view ComparisonDirectionName(ComparisonDirection d) {
  switch (d) {
    case ComparisonDirection::kEq: return "EQ";
    case ComparisonDirection::kNe: return "NE";
    case ComparisonDirection::kLt: return "LT";
    case ComparisonDirection::kLe: return "LE";
    case ComparisonDirection::kGt: return "GT";
    case ComparisonDirection::kGe: return "GE";
  }
  return "EQ";
}

std::optional<ComparisonDirection> ComparisonDirectionFromName(std::string_view s) {
  if (s == "EQ") return ComparisonDirection::kEq;
  if (s == "NE") return ComparisonDirection::kNe;
  if (s == "LT") return ComparisonDirection::kLt;
  if (s == "LE") return ComparisonDirection::kLe;
  if (s == "GT") return ComparisonDirection::kGt;
  if (s == "GE") return ComparisonDirection::kGe;
  return std::nullopt;
}

}  // namespace shardscope
