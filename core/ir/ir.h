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
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "core/sharding/shardy.h"
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

// ---- Source locations -----------------------------------------------------------------------------

// XLA's stack-frame index (StackFrameIndexProto), as the module text writes it after the header:
//   FileNames      1 "model.py"
//   FunctionNames  1 "forward"
//   FileLocations  1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=20}
//   StackFrames    1 {file_location_id=1 parent_frame_id=1}
// Ids are 1-based positions in each table. parent_frame_id is written as the parent frame's id
// plus one (XLA's parser subtracts one), so 0 and 1 both mean "no parent".
struct FileLocation {
  int64_t file_name_id = 0, function_name_id = 0, line = 0, end_line = 0, column = 0, end_column = 0;
  bool operator==(const FileLocation&) const = default;
};
struct StackFrame {
  int64_t file_location_id = 0;
  int64_t parent_frame_id = 0;  // as written: parent id + 1
  bool operator==(const StackFrame&) const = default;
};
struct StackFrameIndex {
  std::vector<std::string> file_names, function_names;
  std::vector<FileLocation> file_locations;
  std::vector<StackFrame> stack_frames;
  bool empty() const {
    return file_names.empty() && function_names.empty() && file_locations.empty() && stack_frames.empty();
  }
  bool operator==(const StackFrameIndex&) const = default;
};

// One frame of an instruction's Python (or other frontend) call stack.
struct SourceFrame {
  std::string file;
  std::string function;  // empty when unknown
  int64_t line = 0, column = 0, end_line = 0, end_column = 0;
  std::string ToString() const;  // "file:line[:column] (function)"
};
// Where an instruction came from: frames[0] is the line that produced it, then its callers.
struct SourceLocation {
  std::vector<SourceFrame> frames;
  std::string ToString() const;  // "file:line" of frames[0]
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
  // Moves `inst` (of this computation) to just before `before` in the definition order; the caller
  // keeps the order topological.
  void MoveBefore(Instruction* inst, const Instruction* before);
  // Topological order (post-order from the root, then any unreachable instructions in order).
  std::vector<Instruction*> MakePostOrder() const;
  // Puts the definition order back into a topological one (MakePostOrder's) after a pass added
  // instructions that earlier ones now use (a combined collective replacing several).
  void SortInstructionsTopologically();

  // The execution thread XLA runs this computation on (`}, execution_thread="..."`); empty for
  // the main thread. Other computation attributes are kept verbatim.
  std::string execution_thread;
  std::vector<RawAttribute> raw_attributes;

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
  // is_scheduled=true: the instruction order of every computation is its schedule (XLA builds the
  // schedule from the text order the same way).
  bool is_scheduled = false;
  std::string entry_computation_layout;     // verbatim contents, may be empty
  std::vector<RawAttribute> header_attributes;  // others, verbatim, in order (frontend_attributes, ...)

  // The source-location tables written after the header (FileNames ... StackFrames).
  StackFrameIndex stack_frames;
  // Shardy's meshes (module frontend attribute xla.sdy.meshes), with the user's axis names.
  std::vector<SdyMesh> sdy_meshes;

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

// The source line and call stack of an instruction: from metadata stack_frame_id through the
// module's stack-frame index, else from metadata source_file= / source_line=. nullopt when the
// instruction carries neither (or the index does not have the frame).
std::optional<SourceLocation> SourceLocationOf(const Module& module, const Instruction& inst);

// One field of metadata={...} (op_type, op_name, source_file, source_line, stack_frame_id,
// scheduling_name, ...), unescaped; nullopt when absent.
std::optional<std::string> MetadataField(const Instruction& inst, std::string_view key);

// One entry of a frontend_attributes={k="v", k2={...}} text (an instruction's, or the module
// header's); a quoted value is unescaped, a braced one returned with its braces. nullopt if absent.
std::optional<std::string> FrontendAttribute(std::string_view attributes_text, std::string_view key);
// The module header's frontend_attributes entry `key`.
std::optional<std::string> ModuleFrontendAttribute(const Module& module, std::string_view key);

// A raw (unmodelled) attribute of an instruction, by key; nullptr when absent.
const RawAttribute* FindRawAttribute(const Instruction& inst, std::string_view key);

// ---- Ops the IR keeps generic (opcode_text), as XLA writes them after its backend passes -------

// fusion(...), kind=kLoop, calls=%fused_computation: one kernel running its fused computation.
enum class FusionKind : uint8_t { kLoop, kInput, kOutput, kCustom };
std::string_view FusionKindName(FusionKind k);  // "kLoop", ...
bool IsFusion(const Instruction& inst);
std::optional<FusionKind> FusionKindOf(const Instruction& inst);  // nullopt unless a fusion with kind=
const Computation* FusedComputation(const Instruction& inst);     // nullptr unless a fusion

// Asynchronous pairs: X-start / X-update / X-done for a collective or copy (typed opcodes such as
// all-gather-start, or generic ones such as reduce-scatter-start, all-to-all-start) and the general
// async-start / async-update / async-done wrapping a computation (calls=...).
enum class AsyncPart : uint8_t { kNone, kStart, kUpdate, kDone };
AsyncPart AsyncPartOf(const Instruction& inst);
// The computation an async-start/-update/-done runs (calls=), nullptr otherwise.
const Computation* AsyncWrappedComputation(const Instruction& inst);
// The collective an instruction performs, whatever its form: the opcode itself for a collective,
// the synchronous opcode for a -start half (all-gather-start -> kAllGather, reduce-scatter-start ->
// kReduceScatter, async-start wrapping an all-reduce -> kAllReduce), nullopt for a -done half and
// for anything else. all-to-all and collective-permute come back as themselves.
std::optional<Opcode> CollectiveOpcodeOf(const Instruction& inst);

// The mesh of a module that carries Shardy meshes: the one named "mesh", else the first with axes.
// nullptr when the module has none.
const DeviceMesh* ModuleMesh(const Module& module);

std::string_view ComparisonDirectionName(ComparisonDirection d);  // "EQ", "LT", ...
std::optional<ComparisonDirection> ComparisonDirectionFromName(std::string_view s);

}  // namespace shardscope
