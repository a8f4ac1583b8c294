// Queries over what the IR keeps as text: metadata fields and source locations, frontend
// attributes, raw attributes, and the ops kept generic (fusion, async wrappers).
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <type_traits>

#include "core/ir/hlo_lexer.h"
#include "core/ir/ir.h"

namespace shardscope {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A quoted string at s[i] == '"', unescaped into *out; the index after it (s.size() if unterminated).
size_t ReadQuoted(std::string_view s, size_t i, std::string* out) {
  const size_t e = hlo_internal::ReadQuotedString(s, i, out);
  return e == std::string_view::npos ? s.size() : e;
}

// Index after the group opened at s[i] ('{', '[' or '('), strings honoured.
size_t SkipGroup(std::string_view s, size_t i) {
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      std::string ignored;
      i = ReadQuoted(s, i, &ignored);
      continue;
    }
    if (c == '{' || c == '[' || c == '(') ++depth;
    if (c == '}' || c == ']' || c == ')') {
      if (--depth == 0) return i + 1;
    }
    ++i;
  }
  return i;
}

// Finds `key` in a list of key=value entries separated by `sep` (and/or blanks). Values are
// quoted strings (unescaped), braced groups (kept with braces) or bare words.
std::optional<std::string> FindEntry(std::string_view s, std::string_view key, char sep) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (IsSpace(s[i]) || s[i] == sep)) ++i;
    const size_t kb = i;
    while (i < s.size() && s[i] != '=' && !IsSpace(s[i]) && s[i] != sep) ++i;
    const std::string_view k = s.substr(kb, i - kb);
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i >= s.size() || s[i] != '=') {
      if (i == kb) ++i;  // stray character: step over it
      continue;
    }
    ++i;
    while (i < s.size() && IsSpace(s[i])) ++i;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      i = ReadQuoted(s, i, &value);
    } else if (i < s.size() && (s[i] == '{' || s[i] == '[' || s[i] == '(')) {
      const size_t vb = i;
      i = SkipGroup(s, i);
      value.assign(s.substr(vb, i - vb));
    } else {
      const size_t vb = i;
      while (i < s.size() && !IsSpace(s[i]) && s[i] != sep) ++i;
      value.assign(s.substr(vb, i - vb));
    }
    if (k == key) return value;
  }
  return std::nullopt;
}

std::optional<int64_t> ToInt(const std::optional<std::string>& s) {
  if (!s || s->empty()) return std::nullopt;
  int64_t v = 0;
  auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc() || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---- metadata and source locations ------------------------------------------------------------

std::optional<std::string> MetadataField(const Instruction& inst, std::string_view key) {
  if (inst.metadata.empty()) return std::nullopt;
  return FindEntry(inst.metadata, key, ' ');
}

std::string SourceFrame::ToString() const {
  std::string s = file.empty() ? std::string("<unknown>") : file;
  s += ":" + std::to_string(line);
  if (column > 0) s += ":" + std::to_string(column);
  if (!function.empty()) s += " (" + function + ")";
  return s;
}

std::string SourceLocation::ToString() const {
  if (frames.empty()) return {};
  return (frames[0].file.empty() ? std::string("<unknown>") : frames[0].file) + ":" + std::to_string(frames[0].line);
}

std::optional<SourceLocation> SourceLocationOf(const Module& module, const Instruction& inst) {
  const StackFrameIndex& index = module.stack_frames;
  SourceLocation loc;
  if (auto id = ToInt(MetadataField(inst, "stack_frame_id")); id && *id > 0 && !index.stack_frames.empty()) {
    auto at = [](const auto& table, int64_t one_based) -> const auto* {
      using T = std::decay_t<decltype(table[0])>;
      return one_based >= 1 && static_cast<size_t>(one_based) <= table.size() ? &table[static_cast<size_t>(one_based - 1)]
                                                                              : static_cast<const T*>(nullptr);
    };
    int64_t frame_id = *id;
    // A chain can never be longer than the table; this also stops a malformed cycle.
    for (size_t steps = 0; steps < index.stack_frames.size() && frame_id >= 1; ++steps) {
      const StackFrame* f = at(index.stack_frames, frame_id);
      if (!f) break;
      SourceFrame sf;
      if (const FileLocation* fl = at(index.file_locations, f->file_location_id)) {
        if (const std::string* file = at(index.file_names, fl->file_name_id)) sf.file = *file;
        if (const std::string* fn = at(index.function_names, fl->function_name_id)) sf.function = *fn;
        sf.line = fl->line;
        sf.column = fl->column;
        sf.end_line = fl->end_line;
        sf.end_column = fl->end_column;
      }
      loc.frames.push_back(std::move(sf));
      const int64_t parent = f->parent_frame_id - 1;
      if (parent < 1 || parent == frame_id) break;
      frame_id = parent;
    }
    if (!loc.frames.empty()) return loc;
  }
  auto file = MetadataField(inst, "source_file");
  auto line = ToInt(MetadataField(inst, "source_line"));
  if (!file && !line) return std::nullopt;
  SourceFrame sf;
  sf.file = file.value_or("");
  sf.line = line.value_or(0);
  sf.end_line = ToInt(MetadataField(inst, "source_end_line")).value_or(0);
  sf.column = ToInt(MetadataField(inst, "source_column")).value_or(0);
  sf.end_column = ToInt(MetadataField(inst, "source_end_column")).value_or(0);
  loc.frames.push_back(std::move(sf));
  return loc;
}

// ---- attributes -------------------------------------------------------------------------------

std::optional<std::string> FrontendAttribute(std::string_view attributes_text, std::string_view key) {
  return FindEntry(attributes_text, key, ',');
}

std::optional<std::string> ModuleFrontendAttribute(const Module& module, std::string_view key) {
  for (const auto& a : module.header_attributes) {
    if (a.key != "frontend_attributes") continue;
    std::string_view v = a.value;
    if (v.size() >= 2 && v.front() == '{' && v.back() == '}') v = v.substr(1, v.size() - 2);
    return FrontendAttribute(v, key);
  }
  return std::nullopt;
}

const RawAttribute* FindRawAttribute(const Instruction& inst, std::string_view key) {
  for (const auto& a : inst.raw_attributes)
    if (a.key == key) return &a;
  return nullptr;
}

// ---- fusion and async ops ----------------------------------------------------------------------

std::string_view FusionKindName(FusionKind k) {
  switch (k) {
    case FusionKind::kLoop: return "kLoop";
    case FusionKind::kInput: return "kInput";
    case FusionKind::kOutput: return "kOutput";
    case FusionKind::kCustom: return "kCustom";
  }
  return "kLoop";
}

bool IsFusion(const Instruction& inst) {
  return inst.opcode() == Opcode::kGeneric && inst.opcode_text() == "fusion";
}

std::optional<FusionKind> FusionKindOf(const Instruction& inst) {
  if (!IsFusion(inst)) return std::nullopt;
  const RawAttribute* kind = FindRawAttribute(inst, "kind");
  if (!kind) return std::nullopt;
  for (FusionKind k : {FusionKind::kLoop, FusionKind::kInput, FusionKind::kOutput, FusionKind::kCustom})
    if (kind->value == FusionKindName(k)) return k;
  return std::nullopt;
}

const Computation* FusedComputation(const Instruction& inst) {
  if (!IsFusion(inst) || inst.called_computations().empty()) return nullptr;
  return inst.called_computations()[0];
}

AsyncPart AsyncPartOf(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kAllGatherStart: case Opcode::kAllReduceStart: case Opcode::kCollectivePermuteStart:
    case Opcode::kCopyStart: case Opcode::kSend: case Opcode::kRecv:
      return AsyncPart::kStart;
    case Opcode::kAllGatherDone: case Opcode::kAllReduceDone: case Opcode::kCollectivePermuteDone:
    case Opcode::kCopyDone: case Opcode::kSendDone: case Opcode::kRecvDone:
      return AsyncPart::kDone;
    case Opcode::kGeneric: break;
    default: return AsyncPart::kNone;
  }
  const std::string& t = inst.opcode_text();
  if (EndsWith(t, "-start")) return AsyncPart::kStart;
  if (EndsWith(t, "-update")) return AsyncPart::kUpdate;
  if (EndsWith(t, "-done")) return AsyncPart::kDone;
  return AsyncPart::kNone;
}

const Computation* AsyncWrappedComputation(const Instruction& inst) {
  if (inst.opcode() != Opcode::kGeneric || AsyncPartOf(inst) == AsyncPart::kNone) return nullptr;
  if (!inst.called_computations().empty()) return inst.called_computations()[0];
  // -update / -done name their computation through the -start they continue.
  if (inst.operand_count() > 0 && inst.operand(0)->opcode() == Opcode::kGeneric)
    return inst.operand(0) == &inst ? nullptr : AsyncWrappedComputation(*inst.operand(0));
  return nullptr;
}

std::optional<Opcode> CollectiveOpcodeOf(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kAllGather: case Opcode::kAllReduce: case Opcode::kReduceScatter: case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
      return inst.opcode();
    case Opcode::kAllGatherStart: return Opcode::kAllGather;
    case Opcode::kAllReduceStart: return Opcode::kAllReduce;
    case Opcode::kCollectivePermuteStart: return Opcode::kCollectivePermute;
    case Opcode::kGeneric: break;
    default: return std::nullopt;
  }
  const std::string& t = inst.opcode_text();
  if (!EndsWith(t, "-start")) return std::nullopt;
  if (t == "async-start") {
    const Computation* c = AsyncWrappedComputation(inst);
    if (!c || !c->root()) return std::nullopt;
    const Instruction* r = c->root();
    if (r->opcode() == Opcode::kTuple && r->operand_count() > 0) r = r->operand(0);
    if (r->opcode() == Opcode::kGeneric && r->opcode_text() == "async-start") return std::nullopt;
    return CollectiveOpcodeOf(*r);
  }
  const auto op = OpcodeFromName(std::string_view(t).substr(0, t.size() - 6));
  if (op && IsCollective(*op)) return *op;
  return std::nullopt;
}

const DeviceMesh* ModuleMesh(const Module& module) {
  for (const auto& m : module.sdy_meshes)
    if (m.name == "mesh" && m.mesh.num_axes() > 0) return &m.mesh;
  for (const auto& m : module.sdy_meshes)
    if (m.mesh.num_axes() > 0) return &m.mesh;
  return nullptr;
}

}  // namespace shardscope
