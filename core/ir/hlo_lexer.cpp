#include "core/ir/hlo_lexer.h"

#include <cctype>
#include <charconv>

namespace shardscope::hlo_internal {

namespace {

void AppendInt(std::string* s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s->append(buf, r.ptr);
}

void AppendXList(std::string* s, const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s->push_back('x');
    AppendInt(s, v[i]);
  }
}

}  // namespace

bool TakesDimensions(Opcode op) {
  switch (op) {
    case Opcode::kBroadcast: case Opcode::kTranspose: case Opcode::kReduce: case Opcode::kReverse:
    case Opcode::kConcatenate: case Opcode::kAllGather: case Opcode::kAllGatherStart:
    case Opcode::kReduceScatter: case Opcode::kAllToAll: case Opcode::kSort: case Opcode::kMap:
      return true;
    default:
      return false;
  }
}

bool RequiresDimensions(Opcode op) {
  switch (op) {
    case Opcode::kBroadcast: case Opcode::kTranspose: case Opcode::kReduce: case Opcode::kReverse:
    case Opcode::kConcatenate: case Opcode::kAllGather: case Opcode::kAllGatherStart:
    case Opcode::kReduceScatter: case Opcode::kSort:
      return true;
    default:
      return false;
  }
}

bool TakesWindow(Opcode op) {
  return op == Opcode::kConvolution || op == Opcode::kReduceWindow || op == Opcode::kSelectAndScatter;
}

bool TakesChannelId(Opcode op) {
  return IsCollective(op) || op == Opcode::kSend || op == Opcode::kRecv || op == Opcode::kSendDone ||
         op == Opcode::kRecvDone;
}

bool IsCollectivePermute(Opcode op) {
  return op == Opcode::kCollectivePermute || op == Opcode::kCollectivePermuteStart;
}

bool IsTypedAttribute(Opcode op, std::string_view key) {
  if (op == Opcode::kGeneric) return false;
  if (key == "index") return op == Opcode::kGetTupleElement;
  if (key == "iota_dimension") return op == Opcode::kIota;
  if (key == "dimensions") return TakesDimensions(op);
  if (key == "dynamic_slice_sizes") return op == Opcode::kDynamicSlice;
  if (key == "slice") return op == Opcode::kSlice;
  if (key == "padding") return op == Opcode::kPad;
  if (key == "lhs_batch_dims" || key == "rhs_batch_dims" || key == "lhs_contracting_dims" ||
      key == "rhs_contracting_dims")
    return op == Opcode::kDot;
  if (key == "window") return TakesWindow(op);
  if (key == "dim_labels" || key == "feature_group_count" || key == "batch_group_count")
    return op == Opcode::kConvolution;
  if (key == "offset_dims" || key == "collapsed_slice_dims" || key == "start_index_map" ||
      key == "operand_batching_dims" || key == "start_indices_batching_dims" || key == "slice_sizes")
    return op == Opcode::kGather;
  if (key == "update_window_dims" || key == "inserted_window_dims" || key == "scatter_dims_to_operand_dims" ||
      key == "input_batching_dims" || key == "scatter_indices_batching_dims" || key == "unique_indices")
    return op == Opcode::kScatter;
  if (key == "index_vector_dim" || key == "indices_are_sorted") return op == Opcode::kGather || op == Opcode::kScatter;
  if (key == "direction" || key == "type") return op == Opcode::kCompare;
  if (key == "replica_groups" || key == "use_global_device_ids" || key == "constrain_layout")
    return IsCollective(op) && !IsCollectivePermute(op) && op != Opcode::kCollectivePermuteDone;
  if (key == "source_target_pairs") return IsCollectivePermute(op);
  if (key == "channel_id") return TakesChannelId(op);
  if (key == "custom_call_target") return op == Opcode::kCustomCall;
  if (key == "is_stable") return op == Opcode::kSort;
  return false;
}

Opcode AttributeOpcode(const Instruction& inst) {
  if (inst.opcode() != Opcode::kGeneric) return inst.opcode();
  std::string_view t = inst.opcode_text();
  constexpr std::string_view kStart = "-start";
  if (t.size() <= kStart.size() || t.substr(t.size() - kStart.size()) != kStart) return Opcode::kGeneric;
  const auto op = OpcodeFromName(t.substr(0, t.size() - kStart.size()));
  return op && IsCollective(*op) ? *op : Opcode::kGeneric;
}

bool PrintsDimensions(const Instruction& inst) {
  const Opcode op = AttributeOpcode(inst);
  if (!TakesDimensions(op)) return false;
  return inst.has_dimensions_attr || RequiresDimensions(op) || !inst.dimensions.empty();
}

bool PrintsWindow(const Instruction& inst) {
  if (!TakesWindow(inst.opcode())) return false;
  return inst.has_window || !inst.window.dims.empty() || inst.opcode() == Opcode::kReduceWindow;
}

bool PrintsReplicaGroups(const Instruction& inst) {
  if (!IsTypedAttribute(AttributeOpcode(inst), "replica_groups")) return false;
  return inst.has_replica_groups || !inst.replica_groups.empty();
}

std::string EscapeString(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          const char* hex = "0123456789abcdef";
          out += "\\x";
          out += hex[(static_cast<unsigned char>(c) >> 4) & 0xf];
          out += hex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out;
}

size_t ReadQuotedString(std::string_view s, size_t i, std::string* out) {
  ++i;  // the opening quote
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (c == '"') return i + 1;
    if (c != '\\' || i + 1 >= n) {
      if (out) *out += c;
      ++i;
      continue;
    }
    const char e = s[i + 1];
    i += 2;
    if (!out) continue;
    switch (e) {
      case 'n': *out += '\n'; break;
      case 't': *out += '\t'; break;
      case 'r': *out += '\r'; break;
      case 'x': {
        int v = 0, k = 0;
        while (k < 2 && i < n && std::isxdigit(static_cast<unsigned char>(s[i]))) {
          const char h = s[i++];
          v = v * 16 + (IsDigit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
          ++k;
        }
        *out += static_cast<char>(v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0', k = 1;
          while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
            v = v * 8 + (s[i++] - '0');
            ++k;
          }
          *out += static_cast<char>(v);
        } else {
          *out += e;
        }
    }
  }
  return std::string_view::npos;
}

std::string WindowToString(const Window& w) {
  std::string s = "{";
  if (!w.dims.empty()) {
    std::vector<int64_t> size, stride, lhs, rhs;
    bool any_stride = false, any_pad = false, any_lhs = false, any_rhs = false, any_rev = false;
    for (const auto& d : w.dims) {
      size.push_back(d.size);
      stride.push_back(d.stride);
      lhs.push_back(d.base_dilation);
      rhs.push_back(d.window_dilation);
      any_stride |= d.stride != 1;
      any_pad |= d.padding_low != 0 || d.padding_high != 0;
      any_lhs |= d.base_dilation != 1;
      any_rhs |= d.window_dilation != 1;
      any_rev |= d.window_reversal;
    }
    s += "size=";
    AppendXList(&s, size);
    if (any_stride) {
      s += " stride=";
      AppendXList(&s, stride);
    }
    if (any_pad) {
      s += " pad=";
      for (size_t i = 0; i < w.dims.size(); ++i) {
        if (i) s += 'x';
        AppendInt(&s, w.dims[i].padding_low);
        s += '_';
        AppendInt(&s, w.dims[i].padding_high);
      }
    }
    if (any_lhs) {
      s += " lhs_dilate=";
      AppendXList(&s, lhs);
    }
    if (any_rhs) {
      s += " rhs_dilate=";
      AppendXList(&s, rhs);
    }
    if (any_rev) {
      s += " rhs_reversal=";
      for (size_t i = 0; i < w.dims.size(); ++i) {
        if (i) s += 'x';
        s += w.dims[i].window_reversal ? '1' : '0';
      }
    }
  }
  s += "}";
  return s;
}

std::string DimLabelsToString(const ConvolutionDimensionNumbers& d) {
  auto labels = [](int64_t a_pos, char a, int64_t b_pos, char b, const std::vector<int64_t>& spatial) {
    const size_t n = spatial.size() + 2;
    std::string out(n, '?');
    auto put = [&](int64_t pos, char c) {
      if (pos >= 0 && static_cast<size_t>(pos) < n) out[static_cast<size_t>(pos)] = c;
    };
    put(a_pos, a);
    put(b_pos, b);
    for (size_t i = 0; i < spatial.size(); ++i) put(spatial[i], static_cast<char>('0' + (i % 10)));
    return out;
  };
  return labels(d.input_batch, 'b', d.input_feature, 'f', d.input_spatial) + "_" +
         labels(d.kernel_input_feature, 'i', d.kernel_output_feature, 'o', d.kernel_spatial) + "->" +
         labels(d.output_batch, 'b', d.output_feature, 'f', d.output_spatial);
}

std::string PaddingToString(const std::vector<PaddingDim>& p) {
  bool any_interior = false;
  for (const auto& d : p) any_interior |= d.interior != 0;
  std::string s;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) s += 'x';
    AppendInt(&s, p[i].low);
    s += '_';
    AppendInt(&s, p[i].high);
    if (any_interior) {
      s += '_';
      AppendInt(&s, p[i].interior);
    }
  }
  return s;
}

std::string SliceToString(const SliceSpec& sl) {
  std::string s = "{";
  for (size_t i = 0; i < sl.starts.size(); ++i) {
    if (i) s += ", ";
    s += '[';
    AppendInt(&s, sl.starts[i]);
    s += ':';
    AppendInt(&s, i < sl.limits.size() ? sl.limits[i] : 0);
    const int64_t stride = i < sl.strides.size() ? sl.strides[i] : 1;
    if (stride != 1) {
      s += ':';
      AppendInt(&s, stride);
    }
    s += ']';
  }
  s += '}';
  return s;
}

}  // namespace shardscope::hlo_internal
