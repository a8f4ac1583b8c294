// The IR: Module -> Computations -> Instructions, SSA, with XLA HLO's op set and typed attributes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ir/opcodes.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"

namespace shardscope {

class Computation;
class Module;

// ---- Typed attributes --------------------------------------------------------------------------

struct DotDimensionNumbers {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
  bool operator==(const DotDimensionNumbers&) const = default;
};

struct WindowDimension {
  int64_t size = 1, stride = 1, padding_low = 0, padding_high = 0;
  int64_t base_dilation = 1, window_dilation = 1;  // lhs_dilate / rhs_dilate
  bool window_reversal = false;
  bool operator==(const WindowDimension&) const = default;
};
struct Window {
  std::vector<WindowDimension> dims;
  bool operator==(const Window&) const = default;
};

// dim_labels=b01f_01io->b01f
struct ConvolutionDimensionNumbers {
  int64_t input_batch = 0, input_feature = 1;
  std::vector<int64_t> input_spatial;
  int64_t kernel_input_feature = 0, kernel_output_feature = 1;
  std::vector<int64_t> kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  std::vector<int64_t> output_spatial;
  bool operator==(const ConvolutionDimensionNumbers&) const = default;
};

struct SliceSpec {
  std::vector<int64_t> starts, limits, strides;
  bool operator==(const SliceSpec&) const = default;
};

struct PaddingDim {
  int64_t low = 0, high = 0, interior = 0;
  bool operator==(const PaddingDim&) const = default;
};

struct GatherDimensionNumbers {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  std::vector<int64_t> operand_batching_dims, start_indices_batching_dims;
  int64_t index_vector_dim = 0;
  bool operator==(const GatherDimensionNumbers&) const = default;
};

struct ScatterDimensionNumbers {
  std::vector<int64_t> update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  std::vector<int64_t> input_batching_dims, scatter_indices_batching_dims;
  int64_t index_vector_dim = 0;
  bool operator==(const ScatterDimensionNumbers&) const = default;
};

// replica_groups={{0,1},{2,3}} or the iota form replica_groups=[2,2]<=[4] / [2,2]<=[2,2]T(1,0).
struct ReplicaGroups {
  std::vector<std::vector<int64_t>> groups;  // always materialised
  bool iota_form = false;                    // print as iota when it was given so
  std::vector<int64_t> iota_dims;            // [num_groups, group_size]
  std::vector<int64_t> iota_reshape, iota_perm;
  bool empty() const { return groups.empty(); }
  bool operator==(const ReplicaGroups& o) const { return groups == o.groups; }
};

enum class ComparisonDirection : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

// An attribute the IR does not model: kept verbatim (key=value text) and printed back.
struct RawAttribute {
  std::string key;
  std::string value;  // raw text as written
  bool operator==(const RawAttribute&) const = default;
};

// A constant's value: kept as text for printing and, where numeric, as doubles for evaluation.
struct Literal {
  std::string text;             // what was inside constant(...)
  std::vector<double> values;   // row-major, when numeric (empty for tuples / unparsed)
  bool operator==(const Literal& o) const { return text == o.text; }
};

// ---- Instruction ---------------------------------------------------------------------------------

class Instruction {
 public:
  Opcode opcode() const { return opcode_; }
  // The opcode as written: equals OpcodeName(opcode()) except for kGeneric.
  const std::string& opcode_text() const { return opcode_text_; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  int64_t id() const { return id_; }
  const Shape& shape() const { return shape_; }
  Shape* mutable_shape() { return &shape_; }
  void set_shape(Shape s) { shape_ = std::move(s); }

  const std::vector<Instruction*>& operands() const { return operands_; }
  Instruction* operand(int64_t i) const { return operands_[static_cast<size_t>(i)]; }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  const std::vector<Instruction*>& users() const { return users_; }
  Computation* parent() const { return parent_; }
  bool is_root() const;

  // Operand edits keep the users lists consistent.
  void ReplaceOperand(int64_t i, Instruction* new_operand);
  void AppendOperand(Instruction* op);
  // Makes every user of this instruction use `other` instead (and the root, if this is the root).
  void ReplaceAllUsesWith(Instruction* other);

  // Called computations, in XLA's order (to_apply; condition, body; branches; calls).
  const std::vector<Computation*>& called_computations() const { return called_; }
  std::vector<Computation*>& mutable_called_computations() { return called_; }
  Computation* to_apply() const { return called_.empty() ? nullptr : called_[0]; }
  Computation* while_condition() const { return called_.size() > 0 ? called_[0] : nullptr; }
  Computation* while_body() const { return called_.size() > 1 ? called_[1] : nullptr; }

  // Sharding.
  const std::optional<HloSharding>& sharding() const { return sharding_; }
  bool has_sharding() const { return sharding_.has_value(); }
  void set_sharding(HloSharding s) { sharding_ = std::move(s); }
  void clear_sharding() { sharding_.reset(); }

  // ---- typed attributes (which ones are meaningful depends on the opcode) ----
  int64_t parameter_number = -1;            // parameter
  int64_t tuple_index = -1;                 // get-tuple-element index=
  int64_t iota_dimension = -1;              // iota
  std::vector<int64_t> dimensions;          // broadcast, transpose, reduce, reverse, concatenate,
                                            // all-gather, reduce-scatter, all-to-all, sort
  bool has_dimensions_attr = false;         // dimensions={} written (distinguishes {} from absent)
  std::vector<int64_t> dynamic_slice_sizes; // dynamic-slice
  SliceSpec slice;                          // slice
  std::vector<PaddingDim> padding;          // pad
  DotDimensionNumbers dot_dims;             // dot
  Window window;                            // convolution, reduce-window, select-and-scatter
  bool has_window = false;
  ConvolutionDimensionNumbers conv_dims;    // convolution
  int64_t feature_group_count = 1, batch_group_count = 1;
  GatherDimensionNumbers gather_dims;       // gather
  std::vector<int64_t> gather_slice_sizes;
  bool indices_are_sorted = false, unique_indices = false;
  ScatterDimensionNumbers scatter_dims;     // scatter
  ComparisonDirection comparison = ComparisonDirection::kEq;  // compare direction=
  std::string comparison_type;              // compare type= (kept verbatim)
  ReplicaGroups replica_groups;             // collectives
  bool has_replica_groups = false;
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;  // collective-permute
  std::optional<int64_t> channel_id;
  bool use_global_device_ids = false;
  bool constrain_layout = false;
  std::string custom_call_target;           // custom-call
  bool is_stable = false;                   // sort
  Literal literal;                          // constant
  std::string backend_config;               // verbatim, including quotes/braces as written
  std::string metadata;                     // contents of metadata={...}, verbatim
  std::string frontend_attributes;          // contents of frontend_attributes={...}, verbatim
  std::vector<RawAttribute> raw_attributes; // everything else, in order
  std::string op_name() const;              // metadata op_name="..." (empty if none)

  // Control predecessors (control-predecessors={...}), printed back.
  std::vector<Instruction*> control_predecessors;

  // The `Sharding` custom-call's unspecified dims (backend_config="unspecified_dims=[0]").
  std::vector<int64_t> UnspecifiedDims() const;

 private:
  friend class Computation;
  friend class Module;
  Opcode opcode_ = Opcode::kGeneric;
  std::string opcode_text_;
  std::string name_;
  int64_t id_ = -1;
  Shape shape_;
  std::vector<Instruction*> operands_;
  std::vector<Instruction*> users_;
  std::vector<Computation*> called_;
  Computation* parent_ = nullptr;
  std::optional<HloSharding> sharding_;
};

// ---- Computation ----------------------------------------------------------------------------------

class Computation {
 public:
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  Module* parent() const { return parent_; }

  // Instructions in definition order (a valid topological order: operands come first).
  const std::vector<std::unique_ptr<Instruction>>& instructions() const { return instructions_; }
  int64_t instruction_count() const { return static_cast<int64_t>(instructions_.size()); }
  Instruction* root() const { return root_; }
  void set_root(Instruction* r) { root_ = r; }
  const std::vector<Instruction*>& parameters() const { return parameters_; }
  Instruction* parameter(int64_t i) const { return parameters_[static_cast<size_t>(i)]; }
  Instruction* Find(std::string_view name) const;  // nullptr if absent

  // Adds an instruction (operands must already be in this computation). Assigns a unique name
  // derived from `name` (or the opcode) when empty or taken, and a module-unique id.
  Instruction* AddInstruction(Opcode op, Shape shape, std::vector<Instruction*> operands,
                              std::string name = "");
  Instruction* AddGeneric(std::string opcode_text, Shape shape, std::vector<Instruction*> operands,
                          std::string name = "");
  // Removes an instruction that has no users and is not the root.
  Status RemoveInstruction(Instruction* inst);
  // Removes several at once in one pass over the computation (each must have no users outside
  // the set and not be the root); an error names the first that cannot go and removes nothing.
  Status RemoveInstructions(const std::vector<Instruction*>& dead);
  // Topological order (post-order from the root, then any unreachable instructions in order).
  std::vector<Instruction*> MakePostOrder() const;
  // Puts the definition order back into a topological one (MakePostOrder's) after a pass added
  // instructions that earlier ones now use (a combined collective replacing several).
  void SortInstructionsTopologically();

 private:
  friend class Module;
  Instruction* Adopt(std::unique_ptr<Instruction> inst);
  std::string name_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Instruction>> instructions_;
  std::vector<Instruction*> parameters_;
  std::unordered_map<std::string, Instruction*> by_name_;
  Instruction* root_ = nullptr;
};

// ---- Module -----------------------------------------------------------------------------------------

class Module {
 public:
  explicit Module(std::string name = "module") : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  Computation* AddComputation(std::string name, bool is_entry = false);
  const std::vector<std::unique_ptr<Computation>>& computations() const { return computations_; }
  Computation* entry() const { return entry_; }
  void set_entry(Computation* c) { entry_ = c; }
  Computation* FindComputation(std::string_view name) const;
  // Computations in an order where callees come before callers.
  std::vector<Computation*> MakeComputationPostOrder() const;
  int64_t instruction_count() const;
  // Finds an instruction by name anywhere in the module ("comp/name" qualifies it).
  Instruction* FindInstruction(std::string_view name) const;

  // Header attributes.
  int64_t num_partitions = 1;
  int64_t num_replicas = 1;
  std::string entry_computation_layout;     // verbatim contents, may be empty
  std::vector<RawAttribute> header_attributes;  // others, verbatim, in order

  // Deep copy (instruction names, ids and shardings kept).
  std::unique_ptr<Module> Clone() const;

  int64_t NextId() { return next_id_++; }
  // Returns `base` if unused in the module, else base.N with the smallest free N.
  std::string UniqueName(std::string_view base);
  void RegisterName(const std::string& n) { names_.emplace(n, 1); }  // a duplicate becomes n.1 (XLA)
  bool HasName(const std::string& n) const { return names_.count(n) != 0; }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
  int64_t next_id_ = 0;
  std::unordered_map<std::string, int64_t> names_;  // name -> next suffix to try
};

// Copies every typed and raw attribute of `from` onto `to` (not the opcode, shape, operands,
// called computations, control predecessors, name or sharding).
void CopyAttributes(const Instruction& from, Instruction* to);

std::string_view ComparisonDirectionName(ComparisonDirection d);  // "EQ", "LT", ...
std::optional<ComparisonDirection> ComparisonDirectionFromName(std::string_view s);

}  // namespace shardscope
