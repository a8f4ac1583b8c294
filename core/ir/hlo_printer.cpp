// Module -> canonical XLA HLO text, and structural module equality for round-trip checks.
//
// The canonical form: "HloModule NAME, attrs", then each computation in module order as
// "[ENTRY ]%name (p: shape, ...) -> shape {" with one instruction per line, "%" on every name,
// operands by name only, typed attributes in a fixed order, then raw attributes in their original
// order, then sharding, metadata, backend_config, frontend_attributes, control-predecessors.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/ir/hlo_lexer.h"
#include "core/ir/replica_groups.h"
#include "core/ir/hlo_text.h"

namespace shardscope {

namespace {

using hlo_internal::EscapeString;

void AppendInt(std::string* s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s->append(buf, r.ptr);
}

void AppendList(std::string* s, const std::vector<int64_t>& v) {
  s->push_back('{');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s->push_back(',');
    AppendInt(s, v[i]);
  }
  s->push_back('}');
}

void AppendName(std::string* s, const std::string& name) {
  s->push_back('%');
  s->append(name);
}

void AppendCompName(std::string* s, const Computation* c) {
  s->push_back('%');
  s->append(c ? c->name() : std::string("null"));
}

// One element of a literal generated from Literal::values (when no text was kept).
void AppendLiteralValue(std::string* s, PrimitiveType t, double v) {
  if (t == PrimitiveType::kPred) {
    s->append(v != 0 ? "true" : "false");
    return;
  }
  if (std::isnan(v)) {
    s->append("nan");
    return;
  }
  if (std::isinf(v)) {
    s->append(v < 0 ? "-inf" : "inf");
    return;
  }
  if (IsInteger(t)) {
    AppendInt(s, static_cast<int64_t>(std::llround(v)));
    return;
  }
  char buf[64];
  std::to_chars_result r;
  if (t == PrimitiveType::kF64) r = std::to_chars(buf, buf + sizeof(buf), v);
  else r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  s->append(buf, r.ptr);
}

std::string LiteralText(const Instruction& inst) {
  if (!inst.literal.text.empty()) return inst.literal.text;
  const Shape& shape = inst.shape();
  const auto& values = inst.literal.values;
  if (!shape.IsArray() || static_cast<int64_t>(values.size()) != shape.ElementCount() || values.empty())
    return shape.IsArray() && shape.ElementCount() == 0 ? "{}" : "{...}";
  std::string s;
  if (shape.dims.empty()) {
    AppendLiteralValue(&s, shape.type, values[0]);
    return s;
  }
  // Nested braces, row-major.
  const size_t rank = shape.dims.size();
  std::vector<int64_t> idx(rank, 0);
  size_t flat = 0;
  for (size_t d = 0; d < rank; ++d) s.push_back('{');
  while (true) {
    AppendLiteralValue(&s, shape.type, values[flat++]);
    size_t d = rank;
    size_t closed = 0;
    while (d-- > 0) {
      if (++idx[d] < shape.dims[d]) break;
      idx[d] = 0;
      ++closed;
      s.push_back('}');
      if (d == 0) return s;
    }
    s.push_back(',');
    for (size_t k = 0; k < closed; ++k) s.push_back('{');
  }
}

void AppendAttr(std::string* s, std::string_view key) {
  s->append(", ");
  s->append(key);
  s->push_back('=');
}

void AppendCalledComputations(std::string* s, const Instruction& inst) {
  const auto& called = inst.called_computations();
  if (called.empty() || inst.opcode() == Opcode::kGeneric) return;  // generic: kept in raw_attributes
  auto list = [&](std::string_view key, size_t from) {
    AppendAttr(s, key);
    s->push_back('{');
    for (size_t i = from; i < called.size(); ++i) {
      if (i > from) s->append(", ");
      AppendCompName(s, called[i]);
    }
    s->push_back('}');
  };
  switch (inst.opcode()) {
    case Opcode::kWhile:
      if (called.size() == 2) {
        AppendAttr(s, "condition");
        AppendCompName(s, called[0]);
        AppendAttr(s, "body");
        AppendCompName(s, called[1]);
        return;
      }
      break;
    case Opcode::kConditional:
      if (called.size() == 2 && inst.operand_count() > 0 &&
          inst.operand(0)->shape().type == PrimitiveType::kPred) {
        AppendAttr(s, "true_computation");
        AppendCompName(s, called[0]);
        AppendAttr(s, "false_computation");
        AppendCompName(s, called[1]);
      } else {
        list("branch_computations", 0);
      }
      return;
    case Opcode::kSelectAndScatter:
      if (called.size() == 2) {
        AppendAttr(s, "select");
        AppendCompName(s, called[0]);
        AppendAttr(s, "scatter");
        AppendCompName(s, called[1]);
        return;
      }
      break;
    case Opcode::kCustomCall:
      list("called_computations", 0);
      return;
    default:
      break;
  }
  if (called.size() == 1) {
    AppendAttr(s, "to_apply");
    AppendCompName(s, called[0]);
  } else {
    list("called_computations", 0);
  }
}

void AppendTypedAttributes(std::string* s, const Instruction& inst) {
  const Opcode op = hlo_internal::AttributeOpcode(inst);
  if (op == Opcode::kGetTupleElement) {
    AppendAttr(s, "index");
    AppendInt(s, inst.tuple_index);
  }
  if (op == Opcode::kIota) {
    AppendAttr(s, "iota_dimension");
    AppendInt(s, inst.iota_dimension);
  }
  if (hlo_internal::PrintsDimensions(inst)) {
    AppendAttr(s, "dimensions");
    AppendList(s, inst.dimensions);
  }
  if (op == Opcode::kDynamicSlice) {
    AppendAttr(s, "dynamic_slice_sizes");
    AppendList(s, inst.dynamic_slice_sizes);
  }
  if (op == Opcode::kSlice) {
    AppendAttr(s, "slice");
    s->append(hlo_internal::SliceToString(inst.slice));
  }
  if (op == Opcode::kPad) {
    AppendAttr(s, "padding");
    s->append(hlo_internal::PaddingToString(inst.padding));
  }
  if (op == Opcode::kDot) {
    const auto& d = inst.dot_dims;
    if (!d.lhs_batch.empty()) {
      AppendAttr(s, "lhs_batch_dims");
      AppendList(s, d.lhs_batch);
    }
    AppendAttr(s, "lhs_contracting_dims");
    AppendList(s, d.lhs_contracting);
    if (!d.rhs_batch.empty()) {
      AppendAttr(s, "rhs_batch_dims");
      AppendList(s, d.rhs_batch);
    }
    AppendAttr(s, "rhs_contracting_dims");
    AppendList(s, d.rhs_contracting);
  }
  if (hlo_internal::PrintsWindow(inst)) {
    AppendAttr(s, "window");
    s->append(hlo_internal::WindowToString(inst.window));
  }
  if (op == Opcode::kConvolution) {
    AppendAttr(s, "dim_labels");
    s->append(hlo_internal::DimLabelsToString(inst.conv_dims));
    if (inst.feature_group_count != 1) {
      AppendAttr(s, "feature_group_count");
      AppendInt(s, inst.feature_group_count);
    }
    if (inst.batch_group_count != 1) {
      AppendAttr(s, "batch_group_count");
      AppendInt(s, inst.batch_group_count);
    }
  }
  if (op == Opcode::kGather) {
    const auto& g = inst.gather_dims;
    AppendAttr(s, "offset_dims");
    AppendList(s, g.offset_dims);
    AppendAttr(s, "collapsed_slice_dims");
    AppendList(s, g.collapsed_slice_dims);
    AppendAttr(s, "start_index_map");
    AppendList(s, g.start_index_map);
    if (!g.operand_batching_dims.empty()) {
      AppendAttr(s, "operand_batching_dims");
      AppendList(s, g.operand_batching_dims);
    }
    if (!g.start_indices_batching_dims.empty()) {
      AppendAttr(s, "start_indices_batching_dims");
      AppendList(s, g.start_indices_batching_dims);
    }
    AppendAttr(s, "index_vector_dim");
    AppendInt(s, g.index_vector_dim);
    AppendAttr(s, "slice_sizes");
    AppendList(s, inst.gather_slice_sizes);
    if (inst.indices_are_sorted) s->append(", indices_are_sorted=true");
  }
  if (op == Opcode::kScatter) {
    const auto& d = inst.scatter_dims;
    AppendAttr(s, "update_window_dims");
    AppendList(s, d.update_window_dims);
    AppendAttr(s, "inserted_window_dims");
    AppendList(s, d.inserted_window_dims);
    AppendAttr(s, "scatter_dims_to_operand_dims");
    AppendList(s, d.scatter_dims_to_operand_dims);
    if (!d.input_batching_dims.empty()) {
      AppendAttr(s, "input_batching_dims");
      AppendList(s, d.input_batching_dims);
    }
    if (!d.scatter_indices_batching_dims.empty()) {
      AppendAttr(s, "scatter_indices_batching_dims");
      AppendList(s, d.scatter_indices_batching_dims);
    }
    AppendAttr(s, "index_vector_dim");
    AppendInt(s, d.index_vector_dim);
    if (inst.indices_are_sorted) s->append(", indices_are_sorted=true");
    if (inst.unique_indices) s->append(", unique_indices=true");
  }
  if (op == Opcode::kCompare) {
    AppendAttr(s, "direction");
    s->append(ComparisonDirectionName(inst.comparison));
    if (!inst.comparison_type.empty()) {
      AppendAttr(s, "type");
      s->append(inst.comparison_type);
    }
  }
  if (inst.channel_id && hlo_internal::TakesChannelId(op)) {
    AppendAttr(s, "channel_id");
    AppendInt(s, *inst.channel_id);
  }
  if (hlo_internal::PrintsReplicaGroups(inst)) {
    AppendAttr(s, "replica_groups");
    s->append(ReplicaGroupsText(inst.replica_groups));
  }
  if (hlo_internal::IsCollectivePermute(op)) {
    AppendAttr(s, "source_target_pairs");
    s->push_back('{');
    for (size_t i = 0; i < inst.source_target_pairs.size(); ++i) {
      if (i) s->push_back(',');
      s->push_back('{');
      AppendInt(s, inst.source_target_pairs[i].first);
      s->push_back(',');
      AppendInt(s, inst.source_target_pairs[i].second);
      s->push_back('}');
    }
    s->push_back('}');
  }
  if (inst.use_global_device_ids && hlo_internal::IsTypedAttribute(op, "use_global_device_ids"))
    s->append(", use_global_device_ids=true");
  if (inst.constrain_layout && hlo_internal::IsTypedAttribute(op, "constrain_layout"))
    s->append(", constrain_layout=true");
  if (op == Opcode::kCustomCall) {
    AppendAttr(s, "custom_call_target");
    s->push_back('"');
    s->append(EscapeString(inst.custom_call_target));
    s->push_back('"');
  }
  if (op == Opcode::kSort && inst.is_stable) s->append(", is_stable=true");
}

// The stack-frame tables, as XLA writes them between the header and the computations.
void AppendStackFrameIndex(std::string* s, const StackFrameIndex& idx) {
  if (idx.empty()) return;
  auto strings = [&](std::string_view title, const std::vector<std::string>& v) {
    s->push_back('\n');
    s->append(title);
    s->push_back('\n');
    for (size_t i = 0; i < v.size(); ++i) {
      AppendInt(s, static_cast<int64_t>(i + 1));
      s->append(" \"");
      s->append(EscapeString(v[i]));
      s->append("\"\n");
    }
  };
  strings("FileNames", idx.file_names);
  strings("FunctionNames", idx.function_names);
  s->append("\nFileLocations\n");
  for (size_t i = 0; i < idx.file_locations.size(); ++i) {
    const FileLocation& f = idx.file_locations[i];
    AppendInt(s, static_cast<int64_t>(i + 1));
    s->append(" {file_name_id=");
    AppendInt(s, f.file_name_id);
    s->append(" function_name_id=");
    AppendInt(s, f.function_name_id);
    s->append(" line=");
    AppendInt(s, f.line);
    s->append(" end_line=");
    AppendInt(s, f.end_line);
    s->append(" column=");
    AppendInt(s, f.column);
    s->append(" end_column=");
    AppendInt(s, f.end_column);
    s->append("}\n");
  }
  s->append("\nStackFrames\n");
  for (size_t i = 0; i < idx.stack_frames.size(); ++i) {
    AppendInt(s, static_cast<int64_t>(i + 1));
    s->append(" {file_location_id=");
    AppendInt(s, idx.stack_frames[i].file_location_id);
    s->append(" parent_frame_id=");
    AppendInt(s, idx.stack_frames[i].parent_frame_id);
    s->append("}\n");
  }
}

void AppendInstruction(std::string* s, const Instruction& inst, const PrintOptions& options) {
  AppendName(s, inst.name());
  s->append(" = ");
  s->append(inst.shape().ToString(options.print_layouts));
  s->push_back(' ');
  if (inst.opcode() == Opcode::kGeneric) s->append(inst.opcode_text().empty() ? "generic" : inst.opcode_text());
  else s->append(OpcodeName(inst.opcode()));
  s->push_back('(');
  if (inst.opcode() == Opcode::kParameter) {
    AppendInt(s, inst.parameter_number < 0 ? 0 : inst.parameter_number);
  } else if (inst.opcode() == Opcode::kConstant) {
    s->append(LiteralText(inst));
  } else {
    for (int64_t i = 0; i < inst.operand_count(); ++i) {
      if (i) s->append(", ");
      const Instruction* op = inst.operand(i);
      AppendName(s, op ? op->name() : std::string("null"));
    }
  }
  s->push_back(')');
  AppendTypedAttributes(s, inst);
  AppendCalledComputations(s, inst);
  for (const auto& a : inst.raw_attributes) {
    AppendAttr(s, a.key);
    s->append(a.value);
  }
  if (inst.has_sharding()) {
    AppendAttr(s, "sharding");
    s->append(inst.sharding()->ToString(options.print_metadata));
  }
  if (options.print_metadata && !inst.metadata.empty()) {
    AppendAttr(s, "metadata");
    s->push_back('{');
    s->append(inst.metadata);
    s->push_back('}');
  }
  if (options.print_backend_config && !inst.backend_config.empty()) {
    AppendAttr(s, "backend_config");
    s->append(inst.backend_config);
  }
  if (!inst.frontend_attributes.empty()) {
    AppendAttr(s, "frontend_attributes");
    s->push_back('{');
    s->append(inst.frontend_attributes);
    s->push_back('}');
  }
  if (!inst.control_predecessors.empty()) {
    AppendAttr(s, "control-predecessors");
    s->push_back('{');
    for (size_t i = 0; i < inst.control_predecessors.size(); ++i) {
      if (i) s->append(", ");
      const Instruction* cp = inst.control_predecessors[i];
      AppendName(s, cp ? cp->name() : std::string("null"));
    }
    s->push_back('}');
  }
}

}  // namespace

std::string PrintInstruction(const Instruction& inst, const PrintOptions& options) {
  std::string s;
  AppendInstruction(&s, inst, options);
  return s;
}

std::string PrintHloModule(const Module& module, const PrintOptions& options) {
  std::string s;
  s.reserve(static_cast<size_t>(module.instruction_count()) * 96 + 256);
  s.append("HloModule ");
  s.append(module.name().empty() ? std::string("module") : module.name());
  if (module.is_scheduled) s.append(", is_scheduled=true");
  if (!module.entry_computation_layout.empty()) {
    s.append(", entry_computation_layout={");
    s.append(module.entry_computation_layout);
    s.push_back('}');
  }
  for (const auto& a : module.header_attributes) {
    AppendAttr(&s, a.key);
    s.append(a.value);
  }
  if (module.num_replicas != 1) {
    s.append(", replica_count=");
    AppendInt(&s, module.num_replicas);
  }
  if (module.num_partitions != 1) {
    s.append(", num_partitions=");
    AppendInt(&s, module.num_partitions);
  }
  s.append("\n");
  AppendStackFrameIndex(&s, module.stack_frames);
  // Callees before callers, the entry last (XLA's order), whatever order they were created in.
  for (const Computation* comp : module.MakeComputationPostOrder()) {
    s.push_back('\n');
    if (comp == module.entry()) s.append("ENTRY ");
    AppendName(&s, comp->name());
    s.append(" (");
    bool first = true;
    for (const Instruction* p : comp->parameters()) {
      if (!p) continue;
      if (!first) s.append(", ");
      first = false;
      s.append(p->name());
      s.append(": ");
      s.append(p->shape().ToString(options.print_layouts));
    }
    s.append(") -> ");
    s.append(comp->root() ? comp->root()->shape().ToString(options.print_layouts) : std::string("()"));
    s.append(" {\n");
    for (const auto& inst : comp->instructions()) {
      s.append("  ");
      if (inst.get() == comp->root()) s.append("ROOT ");
      AppendInstruction(&s, *inst, options);
      s.push_back('\n');
    }
    s.append("}");
    if (!comp->execution_thread.empty()) {
      s.append(", execution_thread=\"");
      s.append(EscapeString(comp->execution_thread));
      s.push_back('"');
    }
    for (const auto& a : comp->raw_attributes) {
      AppendAttr(&s, a.key);
      s.append(a.value);
    }
    s.push_back('\n');
  }
  return s;
}

// ---- ModulesEqual --------------------------------------------------------------------------------

namespace {

bool LiteralsEqual(const Literal& a, const Literal& b) {
  if (a.text == b.text) return true;
  // A constant built without text or values prints as the elided "{...}" (or "{}").
  auto elided = [](const Literal& l) { return l.values.empty() && (l.text.empty() || l.text == "{...}"); };
  if (elided(a) && elided(b)) return true;
  if (a.values.empty() || b.values.empty() || a.values.size() != b.values.size()) return false;
  for (size_t i = 0; i < a.values.size(); ++i) {
    const double x = a.values[i], y = b.values[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (x != y) return false;
  }
  return true;
}

std::string ListText(const std::vector<int64_t>& v) {
  std::string s;
  AppendList(&s, v);
  return s;
}

// Compares the attributes; on difference writes the attribute name and both values.
bool InstructionsEqual(const Instruction& a, const Instruction& b, std::string* what) {
  auto diff = [&](std::string_view field, const std::string& x, const std::string& y) {
    *what = std::string(field) + " " + x + " vs " + y;
    return false;
  };
  if (a.name() != b.name()) return diff("name", a.name(), b.name());
  if (a.opcode() != b.opcode() || (a.opcode() == Opcode::kGeneric && a.opcode_text() != b.opcode_text()))
    return diff("opcode", a.opcode_text(), b.opcode_text());
  const std::string sa = a.shape().ToString(), sb = b.shape().ToString();
  if (sa != sb) return diff("shape", sa, sb);
  if (a.operand_count() != b.operand_count())
    return diff("operand count", std::to_string(a.operand_count()), std::to_string(b.operand_count()));
  for (int64_t i = 0; i < a.operand_count(); ++i) {
    const Instruction* x = a.operand(i);
    const Instruction* y = b.operand(i);
    if (!x || !y || x->name() != y->name())
      return diff("operand " + std::to_string(i), x ? x->name() : "null", y ? y->name() : "null");
  }
  const auto& ca = a.called_computations();
  const auto& cb = b.called_computations();
  if (ca.size() != cb.size())
    return diff("called computation count", std::to_string(ca.size()), std::to_string(cb.size()));
  for (size_t i = 0; i < ca.size(); ++i) {
    const std::string x = ca[i] ? ca[i]->name() : "null", y = cb[i] ? cb[i]->name() : "null";
    if (x != y) return diff("called computation " + std::to_string(i), x, y);
  }
  if (a.is_root() != b.is_root()) return diff("ROOT", a.is_root() ? "yes" : "no", b.is_root() ? "yes" : "no");
  if (a.has_sharding() != b.has_sharding())
    return diff("sharding", a.has_sharding() ? a.sharding()->ToString() : "none",
                b.has_sharding() ? b.sharding()->ToString() : "none");
  if (a.has_sharding() && !(*a.sharding() == *b.sharding()))
    return diff("sharding", a.sharding()->ToString(), b.sharding()->ToString());

#define SHARDSCOPE_CMP_INT(field)                                                  \
  if (a.field != b.field) return diff(#field, std::to_string(a.field), std::to_string(b.field));
#define SHARDSCOPE_CMP_LIST(field) \
  if (a.field != b.field) return diff(#field, ListText(a.field), ListText(b.field));
#define SHARDSCOPE_CMP_STR(field) \
  if (a.field != b.field) return diff(#field, "'" + a.field + "'", "'" + b.field + "'");

  SHARDSCOPE_CMP_INT(parameter_number)
  SHARDSCOPE_CMP_INT(tuple_index)
  SHARDSCOPE_CMP_INT(iota_dimension)
  SHARDSCOPE_CMP_LIST(dimensions)
  if (hlo_internal::PrintsDimensions(a) != hlo_internal::PrintsDimensions(b))
    return diff("dimensions presence", "", "");
  SHARDSCOPE_CMP_LIST(dynamic_slice_sizes)
  if (!(a.slice == b.slice))
    return diff("slice", hlo_internal::SliceToString(a.slice), hlo_internal::SliceToString(b.slice));
  if (!(a.padding == b.padding))
    return diff("padding", hlo_internal::PaddingToString(a.padding), hlo_internal::PaddingToString(b.padding));
  SHARDSCOPE_CMP_LIST(dot_dims.lhs_batch)
  SHARDSCOPE_CMP_LIST(dot_dims.rhs_batch)
  SHARDSCOPE_CMP_LIST(dot_dims.lhs_contracting)
  SHARDSCOPE_CMP_LIST(dot_dims.rhs_contracting)
  if (!(a.window == b.window))
    return diff("window", hlo_internal::WindowToString(a.window), hlo_internal::WindowToString(b.window));
  if (hlo_internal::PrintsWindow(a) != hlo_internal::PrintsWindow(b)) return diff("window presence", "", "");
  if (!(a.conv_dims == b.conv_dims))
    return diff("dim_labels", hlo_internal::DimLabelsToString(a.conv_dims), hlo_internal::DimLabelsToString(b.conv_dims));
  SHARDSCOPE_CMP_INT(feature_group_count)
  SHARDSCOPE_CMP_INT(batch_group_count)
  SHARDSCOPE_CMP_LIST(gather_dims.offset_dims)
  SHARDSCOPE_CMP_LIST(gather_dims.collapsed_slice_dims)
  SHARDSCOPE_CMP_LIST(gather_dims.start_index_map)
  SHARDSCOPE_CMP_LIST(gather_dims.operand_batching_dims)
  SHARDSCOPE_CMP_LIST(gather_dims.start_indices_batching_dims)
  SHARDSCOPE_CMP_INT(gather_dims.index_vector_dim)
  SHARDSCOPE_CMP_LIST(gather_slice_sizes)
  SHARDSCOPE_CMP_INT(indices_are_sorted)
  SHARDSCOPE_CMP_INT(unique_indices)
  SHARDSCOPE_CMP_LIST(scatter_dims.update_window_dims)
  SHARDSCOPE_CMP_LIST(scatter_dims.inserted_window_dims)
  SHARDSCOPE_CMP_LIST(scatter_dims.scatter_dims_to_operand_dims)
  SHARDSCOPE_CMP_LIST(scatter_dims.input_batching_dims)
  SHARDSCOPE_CMP_LIST(scatter_dims.scatter_indices_batching_dims)
  SHARDSCOPE_CMP_INT(scatter_dims.index_vector_dim)
  if (a.comparison != b.comparison)
    return diff("direction", std::string(ComparisonDirectionName(a.comparison)),
                std::string(ComparisonDirectionName(b.comparison)));
  SHARDSCOPE_CMP_STR(comparison_type)
  if (!(a.replica_groups == b.replica_groups))
    return diff("replica_groups", ReplicaGroupsText(a.replica_groups),
                ReplicaGroupsText(b.replica_groups));
  if (hlo_internal::PrintsReplicaGroups(a) != hlo_internal::PrintsReplicaGroups(b))
    return diff("replica_groups presence", "", "");
  if (a.source_target_pairs != b.source_target_pairs) return diff("source_target_pairs", "", "");
  if (a.channel_id != b.channel_id)
    return diff("channel_id", a.channel_id ? std::to_string(*a.channel_id) : "none",
                b.channel_id ? std::to_string(*b.channel_id) : "none");
  SHARDSCOPE_CMP_INT(use_global_device_ids)
  SHARDSCOPE_CMP_INT(constrain_layout)
  SHARDSCOPE_CMP_STR(custom_call_target)
  SHARDSCOPE_CMP_INT(is_stable)
  if (!LiteralsEqual(a.literal, b.literal)) return diff("literal", a.literal.text, b.literal.text);
  SHARDSCOPE_CMP_STR(backend_config)
  SHARDSCOPE_CMP_STR(metadata)
  SHARDSCOPE_CMP_STR(frontend_attributes)
#undef SHARDSCOPE_CMP_INT
#undef SHARDSCOPE_CMP_LIST
#undef SHARDSCOPE_CMP_STR
  if (a.raw_attributes.size() != b.raw_attributes.size())
    return diff("raw attribute count", std::to_string(a.raw_attributes.size()), std::to_string(b.raw_attributes.size()));
  for (size_t i = 0; i < a.raw_attributes.size(); ++i) {
    const auto& x = a.raw_attributes[i];
    const auto& y = b.raw_attributes[i];
    if (!(x == y)) return diff("raw attribute", x.key + "=" + x.value, y.key + "=" + y.value);
  }
  if (a.control_predecessors.size() != b.control_predecessors.size())
    return diff("control-predecessors count", std::to_string(a.control_predecessors.size()),
                std::to_string(b.control_predecessors.size()));
  for (size_t i = 0; i < a.control_predecessors.size(); ++i) {
    const Instruction* x = a.control_predecessors[i];
    const Instruction* y = b.control_predecessors[i];
    if (!x || !y || x->name() != y->name())
      return diff("control predecessor", x ? x->name() : "null", y ? y->name() : "null");
  }
  return true;
}

}  // namespace

bool ModulesEqual(const Module& a, const Module& b, std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  if (a.name() != b.name()) return fail("module name '" + a.name() + "' vs '" + b.name() + "'");
  if (a.num_partitions != b.num_partitions)
    return fail("num_partitions " + std::to_string(a.num_partitions) + " vs " + std::to_string(b.num_partitions));
  if (a.num_replicas != b.num_replicas)
    return fail("replica_count " + std::to_string(a.num_replicas) + " vs " + std::to_string(b.num_replicas));
  if (a.is_scheduled != b.is_scheduled)
    return fail(std::string("is_scheduled ") + (a.is_scheduled ? "true" : "false") + " vs " +
                (b.is_scheduled ? "true" : "false"));
  if (!(a.stack_frames == b.stack_frames))
    return fail("stack-frame tables differ (" + std::to_string(a.stack_frames.stack_frames.size()) + " vs " +
                std::to_string(b.stack_frames.stack_frames.size()) + " frames)");
  if (!(a.sdy_meshes == b.sdy_meshes)) return fail("Shardy meshes differ");
  if (a.entry_computation_layout != b.entry_computation_layout)
    return fail("entry_computation_layout '" + a.entry_computation_layout + "' vs '" + b.entry_computation_layout + "'");
  if (a.header_attributes.size() != b.header_attributes.size())
    return fail("module attribute count " + std::to_string(a.header_attributes.size()) + " vs " +
                std::to_string(b.header_attributes.size()));
  for (size_t i = 0; i < a.header_attributes.size(); ++i)
    if (!(a.header_attributes[i] == b.header_attributes[i]))
      return fail("module attribute " + a.header_attributes[i].key + "=" + a.header_attributes[i].value + " vs " +
                  b.header_attributes[i].key + "=" + b.header_attributes[i].value);
  const auto& ca = a.computations();
  const auto& cb = b.computations();
  if (ca.size() != cb.size())
    return fail("computation count " + std::to_string(ca.size()) + " vs " + std::to_string(cb.size()));
  for (size_t i = 0; i < ca.size(); ++i) {
    const Computation& x = *ca[i];
    const Computation* yp = b.FindComputation(x.name());
    if (!yp) return fail("computation '" + x.name() + "' missing from the second module");
    const Computation& y = *yp;
    if ((a.entry() == &x) != (b.entry() == &y)) return fail("computation '" + x.name() + "': ENTRY differs");
    if (x.execution_thread != y.execution_thread)
      return fail("computation '" + x.name() + "': execution_thread '" + x.execution_thread + "' vs '" +
                  y.execution_thread + "'");
    if (x.raw_attributes != y.raw_attributes) return fail("computation '" + x.name() + "': attributes differ");
    if (x.instruction_count() != y.instruction_count())
      return fail("computation '" + x.name() + "': " + std::to_string(x.instruction_count()) + " vs " +
                  std::to_string(y.instruction_count()) + " instructions");
    for (int64_t k = 0; k < x.instruction_count(); ++k) {
      const Instruction& ia = *x.instructions()[static_cast<size_t>(k)];
      const Instruction& ib = *y.instructions()[static_cast<size_t>(k)];
      std::string what;
      if (!InstructionsEqual(ia, ib, &what))
        return fail("computation '" + x.name() + "', instruction '" + ia.name() + "': " + what);
    }
  }
  return true;
}

}  // namespace shardscope
