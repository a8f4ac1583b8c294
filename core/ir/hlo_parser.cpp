// XLA HLO module text -> Module. A hand-written recursive-descent parser over the raw bytes
// (string_view, no token allocation). Errors are values: the first error stops the parse and is
// reported as "FILE:LINE:COLUMN: error: expected X, found Y". Recursion is bounded (tuple shapes,
// sharding nesting); everything else is iterative, so no input can exhaust the stack.
//
// Behaviour follows XLA's HloParser where it matters for real modules:
//  - operands must be defined before use within a computation (XLA: "instruction does not exist");
//    computations may be referenced before they are defined (resolved after the whole module);
//  - an operand written with a shape (`f32[8] %x`) must have a shape compatible with %x;
//  - a computation without ROOT returns its last instruction; a module without ENTRY uses its
//    last computation;
//  - instruction names repeated in different computations are uniquified module-wide the way
//    XLA's name uniquer does (the later one becomes name.N); references resolve per computation.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/ir/hlo_lexer.h"
#include "core/ir/replica_groups.h"
#include "core/ir/hlo_text.h"
#include "core/ir/shape_inference.h"
#include "core/ir/shardy_import.h"
#include "core/ir/verifier.h"

namespace shardscope {

namespace {

using hlo_internal::IsAlpha;
using hlo_internal::IsDigit;
using hlo_internal::IsNameChar;
using hlo_internal::IsSpace;

constexpr int kMaxNesting = 64;                        // tuple shapes, sharding braces
constexpr int64_t kMaxIotaElements = int64_t{1} << 22; // iota replica groups materialised

struct NameEntry {
  Instruction* inst;
  size_t offset;
};

// Instruction names of one computation -> definition. Open addressing over a flat array: no
// allocation per name and good locality for 100k-instruction computations.
class NameTable {
 public:
  const NameEntry* Find(std::string_view name) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = Hash(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.index == 0) return nullptr;
      if (s.hash == h && entries_[s.index - 1].first == name) return &entries_[s.index - 1].second;
    }
  }
  // The caller checks Find() first; names are unique here.
  void Insert(std::string_view name, NameEntry e) {
    if ((entries_.size() + 1) * 2 > slots_.size()) Grow();
    entries_.emplace_back(name, e);
    Place(Hash(name), static_cast<uint32_t>(entries_.size()));
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t index = 0;  // 1-based into entries_, 0 = empty
  };
  static uint64_t Hash(std::string_view s) { return std::hash<std::string_view>()(s); }
  void Place(uint64_t h, uint32_t index) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_)
      if (slots_[i].index == 0) {
        slots_[i] = Slot{h, index};
        return;
      }
  }
  void Grow() {
    const size_t n = slots_.empty() ? 64 : slots_.size() * 2;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    for (size_t i = 0; i < entries_.size(); ++i) Place(Hash(entries_[i].first), static_cast<uint32_t>(i + 1));
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::vector<std::pair<std::string_view, NameEntry>> entries_;
};

struct NameRef {
  std::string_view name;
  size_t offset = 0;
};

// A called-computation reference waiting for all computations to be known.
struct CompRef {
  Instruction* inst;
  size_t slot;
  std::string_view name;
  size_t offset;
};

struct ComputationState {
  Computation* comp = nullptr;
  std::string_view name;
  size_t name_offset = 0;
  NameTable names;
  Instruction* root = nullptr;
  size_t root_offset = 0;
  Instruction* last = nullptr;
  std::vector<std::pair<Instruction*, size_t>> params;  // instruction, offset of its number
};

// Computation-valued attributes collected while parsing one instruction; assembled into
// called_computations in XLA's order once all attributes are read.
struct CalledRefs {
  std::optional<NameRef> to_apply, condition, body, true_comp, false_comp, select, scatter;
  std::vector<NameRef> branches, calls;
  bool has_branches = false, has_calls = false;
};

// Attribute keys seen on one instruction: a handful, kept inline (no allocation per instruction).
class KeySet {
 public:
  bool Insert(std::string_view k) {
    if (Contains(k)) return false;
    if (n_ < kInline) inline_[n_++] = k;
    else more_.push_back(k);
    return true;
  }
  bool Contains(std::string_view k) const {
    for (size_t i = 0; i < n_; ++i)
      if (inline_[i] == k) return true;
    return std::find(more_.begin(), more_.end(), k) != more_.end();
  }

 private:
  static constexpr size_t kInline = 16;
  std::array<std::string_view, kInline> inline_;
  size_t n_ = 0;
  std::vector<std::string_view> more_;
};

std::string_view OpName(const Instruction* inst) {
  return inst->opcode() == Opcode::kGeneric ? std::string_view(inst->opcode_text()) : OpcodeName(inst->opcode());
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename) : t_(text), filename_(filename) {}

  Result<std::unique_ptr<Module>> Run(const ParseOptions& options) {
    if (!ParseModule() || !ResolveCalls() || !CheckCallCycles() || !InferMissingShapes()) return MakeError();
    if (needs_parameter_fixup_) module_ = module_->Clone();  // rebuilds parameters() by number
    if (options.import_shardy && t_.find("xla.sdy") != std::string_view::npos) {
      for (const ShardyDiagnostic& d : ImportShardy(*module_)) {
        if (!options.warnings) continue;
        const size_t off = d.instruction_id >= 0 && static_cast<size_t>(d.instruction_id) < inst_offsets_.size()
                               ? inst_offsets_[static_cast<size_t>(d.instruction_id)]
                               : 0;
        auto [l, c] = LineCol(off);
        std::string msg = d.message;
        for (char& ch : msg)
          if (ch == '\n' || ch == '\r') ch = ' ';
        options.warnings->push_back(filename_ + ":" + std::to_string(l) + ":" + std::to_string(c) + ": warning: " + msg);
      }
    }
    if (options.verify) {
      Status s = VerifyModule(*module_);
      if (!s.ok()) return MapVerifierError(s.error());
    }
    return std::move(module_);
  }

  // An attribute value on its own (the text after `key=`), for ParseReplicaGroupsText and
  // ParseSourceTargetPairsText: the module parser's own code, so the two cannot disagree.
  Result<ReplicaGroups> RunReplicaGroups() {
    ReplicaGroups g;
    SkipWs();
    if (p_ < t_.size() && !ParseReplicaGroups(&g)) return ValueError();
    if (!AtValueEnd()) return ValueError();
    return g;
  }
  Result<std::vector<std::pair<int64_t, int64_t>>> RunSourceTargetPairs() {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    SkipWs();
    if (!ParseSourceTargetPairs(&pairs) || !AtValueEnd()) return ValueError();
    return pairs;
  }

 private:
  bool AtValueEnd() {
    SkipWs();
    return p_ >= t_.size() || FailExpected(p_, "the end of the value");
  }
  Error ValueError() const {
    const size_t off = failed_ ? err_off_ : 0;
    return Error("column " + std::to_string(off + 1) + ": " + (failed_ ? err_msg_ : "parse failed"), static_cast<int64_t>(off));
  }

  // ---- errors ---------------------------------------------------------------------------------

  bool Fail(size_t off, std::string msg) {
    if (!failed_) {
      failed_ = true;
      err_off_ = std::min(off, t_.size());
      err_msg_ = std::move(msg);
    }
    return false;
  }
  // Messages are assembled from parts only when a check fails: the success path allocates nothing.
  bool FailExpected(size_t off, std::string_view what, std::string_view what2 = {}, std::string_view what3 = {}) {
    std::string m = "expected ";
    m.append(what).append(what2).append(what3).append(", found ").append(Describe(off));
    return Fail(off, std::move(m));
  }

  // What sits at `off`, for "found ..." messages.
  std::string Describe(size_t off) const {
    if (off >= t_.size()) return "end of input";
    const char c = t_[off];
    if (c == '/' && off + 1 < t_.size() && t_[off + 1] == '*') return "an unterminated comment";
    if (IsNameChar(c) || (c == '%' && off + 1 < t_.size() && IsNameChar(t_[off + 1]))) {
      size_t e = off + 1;
      while (e < t_.size() && IsNameChar(t_[e]) && e - off < 40) ++e;
      std::string s = "'" + std::string(t_.substr(off, e - off));
      if (e < t_.size() && IsNameChar(t_[e])) s += "...";
      return s + "'";
    }
    if (c == '"') return "a string";
    if (c == '\n' || c == '\r') return "end of line";
    if (c == '-' && off + 1 < t_.size() && t_[off + 1] == '>') return "'->'";
    if (c == '<' && off + 1 < t_.size() && t_[off + 1] == '=') return "'<='";
    if (static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f) return std::string("'") + c + "'";
    const char* hex = "0123456789ABCDEF";
    const auto u = static_cast<unsigned char>(c);
    return std::string("byte 0x") + hex[u >> 4] + hex[u & 0xf];
  }

  static std::string Plural(size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  }

  std::pair<int64_t, int64_t> LineCol(size_t off) const {
    off = std::min(off, t_.size());
    int64_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < off; ++i)
      if (t_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    return {line, static_cast<int64_t>(off - line_start) + 1};
  }
  std::string Where(size_t off) const {
    auto [l, c] = LineCol(off);
    return std::to_string(l) + ":" + std::to_string(c);
  }
  Error ErrorAt(size_t off, std::string msg) const {
    for (char& ch : msg)
      if (ch == '\n' || ch == '\r') ch = ' ';
    auto [l, c] = LineCol(off);
    return Error(filename_ + ":" + std::to_string(l) + ":" + std::to_string(c) + ": error: " + msg,
                 static_cast<int64_t>(off));
  }
  Error MakeError() const { return ErrorAt(failed_ ? err_off_ : 0, failed_ ? err_msg_ : "parse failed"); }

  Error MapVerifierError(const Error& e) const {
    // The verifier names "computation/instruction: ..."; point at that instruction's definition.
    size_t off = 0;
    const std::string& m = e.message;
    auto colon = m.find(": ");
    if (colon != std::string::npos) {
      std::string_view prefix(m.data(), colon);
      if (Instruction* inst = prefix.find('/') != std::string_view::npos ? module_->FindInstruction(prefix) : nullptr) {
        auto id = static_cast<size_t>(inst->id());
        if (id < inst_offsets_.size()) off = inst_offsets_[id];
      } else if (auto it = comp_offsets_.find(std::string(prefix)); it != comp_offsets_.end()) {
        off = it->second;
      }
    }
    return ErrorAt(off, m);
  }

  // ---- lexing ---------------------------------------------------------------------------------

  char Cur() const { return p_ < t_.size() ? t_[p_] : '\0'; }
  char At(size_t i) const { return i < t_.size() ? t_[i] : '\0'; }

  void SkipWs() {
    const size_t n = t_.size();
    while (p_ < n) {
      const char c = t_[p_];
      if (IsSpace(c)) {
        ++p_;
      } else if (c == '/' && p_ + 1 < n && t_[p_ + 1] == '/') {
        while (p_ < n && t_[p_] != '\n') ++p_;
      } else if (c == '/' && p_ + 1 < n && t_[p_ + 1] == '*') {
        auto e = t_.find("*/", p_ + 2);
        if (e == std::string_view::npos) return;  // left for the caller to report
        p_ = e + 2;
      } else {
        return;
      }
    }
  }

  bool Eat(char c) {
    SkipWs();
    if (Cur() != c) return false;
    ++p_;
    return true;
  }
  bool Expect(char c, std::string_view what, std::string_view what2 = {}, std::string_view what3 = {}) {
    SkipWs();
    if (Cur() != c) return FailExpected(p_, what, what2, what3);
    ++p_;
    return true;
  }

  std::string_view ReadNameChars() {
    size_t b = p_;
    while (p_ < t_.size() && IsNameChar(t_[p_])) ++p_;
    return t_.substr(b, p_ - b);
  }

  // A keyword (ENTRY, ROOT) as a whole word at the current position (after whitespace).
  bool PeekKeyword(std::string_view w) {
    SkipWs();
    return t_.substr(p_, w.size()) == w && !IsNameChar(At(p_ + w.size()));
  }

  // name ::= '%'? [A-Za-z0-9_.-]+
  bool ParseName(std::string_view* out, size_t* off, std::string_view what, std::string_view what2 = {}) {
    SkipWs();
    *off = p_;
    size_t b = p_;
    if (Cur() == '%') ++p_;
    if (Cur() == '-' || !IsNameChar(Cur())) {
      p_ = b;
      return FailExpected(b, what, what2);
    }
    *out = ReadNameChars();
    return true;
  }

  bool ParseInt(int64_t* v, std::string_view what, bool allow_negative, std::string_view what2 = {}) {
    SkipWs();
    const size_t b = p_;
    if (allow_negative && Cur() == '-') ++p_;
    const size_t d = p_;
    while (IsDigit(Cur())) ++p_;
    if (p_ == d) {
      p_ = b;
      return FailExpected(b, what, what2);
    }
    auto r = std::from_chars(t_.data() + b, t_.data() + p_, *v);
    if (r.ec != std::errc()) {
      return Fail(b, "expected " + std::string(what) + std::string(what2) + ", found out-of-range integer '" +
                         std::string(t_.substr(b, std::min<size_t>(p_ - b, 30))) + "'");
    }
    return true;
  }

  bool ParseNonNegative(int64_t* v, std::string_view what, std::string_view what2 = {}) {
    return ParseInt(v, what, false, what2);
  }

  // The body of a separated list whose opening character was consumed: (item (',' item)*)? close.
  // `item` parses one element (returning false after reporting an error).
  template <typename Item>
  bool ParseSeparatedUntil(char close, std::string_view what, Item&& item) {
    if (Eat(close)) return true;
    while (true) {
      if (!item()) return false;
      SkipWs();
      if (Cur() == ',') {
        ++p_;
        continue;
      }
      if (Cur() == close) {
        ++p_;
        return true;
      }
      return FailExpected(p_, std::string("',' or '") + close + "' in " + std::string(what));
    }
  }

  // '{' (int (',' int)*)? '}'
  bool ParseIntList(std::vector<int64_t>* out, std::string_view what) { return ParseBracketList(out, '{', '}', what); }

  // open (int (',' int)*)? close, e.g. '[' ... ']' for iota replica groups
  bool ParseBracketList(std::vector<int64_t>* out, char open, char close, std::string_view what) {
    out->clear();
    const char open_text[] = {'\'', open, '\'', '\0'};
    if (!Expect(open, open_text, " to start ", what)) return false;
    return ParseSeparatedUntil(close, what, [&] {
      int64_t v;
      if (!ParseNonNegative(&v, "a non-negative integer in ", what)) return false;
      out->push_back(v);
      return true;
    });
  }

  bool ParseBool(bool* v) {
    SkipWs();
    size_t b = p_;
    auto w = ReadNameChars();
    if (w == "true") {
      *v = true;
      return true;
    }
    if (w == "false") {
      *v = false;
      return true;
    }
    p_ = b;
    return FailExpected(b, "true or false");
  }

  // p_ at '"': skips the string (escapes honoured). Optionally unescapes into *out.
  bool ScanString(std::string* out = nullptr) {
    const size_t b = p_;
    if (!out) {  // skipping (the hot path: metadata, backend_config): no unescaping
      for (size_t i = p_ + 1; i < t_.size(); ++i) {
        if (t_[i] == '\\') {
          ++i;
        } else if (t_[i] == '"') {
          p_ = i + 1;
          return true;
        }
      }
    }
    const size_t e = out ? hlo_internal::ReadQuotedString(t_, p_, out) : std::string_view::npos;
    if (e == std::string_view::npos) {
      p_ = t_.size();
      return Fail(t_.size(), "expected '\"' to close the string started at " + Where(b) + ", found end of input");
    }
    p_ = e;
    return true;
  }

  // p_ at '(', '[' or '{': skips to after the matching closer (strings honoured).
  bool ScanBalanced() {
    std::string stack;  // expected closers
    std::vector<size_t> opened;
    while (p_ < t_.size()) {
      const char c = t_[p_];
      if (c == '"') {
        if (!ScanString()) return false;
        continue;
      }
      if (c == '(' || c == '[' || c == '{') {
        stack.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        opened.push_back(p_);
        ++p_;
        continue;
      }
      if (c == ')' || c == ']' || c == '}') {
        if (stack.empty() || c != stack.back()) {
          if (stack.empty()) return FailExpected(p_, "a value");
          return FailExpected(p_, std::string("'") + stack.back() + "' to close the '" +
                                      t_[opened.back()] + "' at " + Where(opened.back()));
        }
        stack.pop_back();
        opened.pop_back();
        ++p_;
        if (stack.empty()) return true;
        continue;
      }
      ++p_;
    }
    if (stack.empty()) return FailExpected(p_, "a value");
    return FailExpected(t_.size(), std::string("'") + stack.back() + "' to close the '" + t_[opened.back()] +
                                       "' at " + Where(opened.back()));
  }

  // A value we do not interpret: balanced groups, strings and other non-space characters, up to
  // whitespace, ',' or a closer at depth 0.
  bool ScanRawValue(std::string_view* out) {
    SkipWs();
    const size_t b = p_;
    while (p_ < t_.size()) {
      const char c = t_[p_];
      if (c == '{' || c == '[' || c == '(') {
        if (!ScanBalanced()) return false;
        continue;
      }
      if (c == '"') {
        if (!ScanString()) return false;
        continue;
      }
      if (IsSpace(c) || c == ',' || c == '}' || c == ')' || c == ']') break;
      if (c == '/' && (At(p_ + 1) == '/' || At(p_ + 1) == '*')) break;
      ++p_;
    }
    if (p_ == b) return FailExpected(b, "an attribute value");
    *out = t_.substr(b, p_ - b);
    return true;
  }

  // '{' ... '}' -> the text between the braces.
  bool ParseBracedText(std::string* out, std::string_view what) {
    SkipWs();
    if (Cur() != '{') return FailExpected(p_, "'{' to start " + std::string(what));
    const size_t b = p_;
    if (!ScanBalanced()) return false;
    out->assign(t_.substr(b + 1, p_ - b - 2));
    return true;
  }

  // ---- shapes ---------------------------------------------------------------------------------

  bool ParseShape(Shape* s, int depth) {
    SkipWs();
    if (Cur() == '(') {
      if (depth >= kMaxNesting) return Fail(p_, "tuple shape nested deeper than 64 levels");
      ++p_;
      std::vector<Shape> elems;
      SkipWs();
      if (Cur() == ')') {
        ++p_;
        *s = Shape::Tuple({});
        return true;
      }
      while (true) {
        Shape e;
        if (!ParseShape(&e, depth + 1)) return false;
        elems.push_back(std::move(e));
        SkipWs();
        if (Cur() == ',') {
          ++p_;
          continue;
        }
        if (Cur() == ')') {
          ++p_;
          break;
        }
        return FailExpected(p_, "',' or ')' in tuple shape");
      }
      *s = Shape::Tuple(std::move(elems));
      return true;
    }
    const size_t b = p_;
    while (p_ < t_.size() && (IsAlpha(t_[p_]) || IsDigit(t_[p_]))) ++p_;
    const std::string_view tname = t_.substr(b, p_ - b);
    auto type = tname.empty() ? std::nullopt : PrimitiveTypeFromName(tname);
    if (!type) {
      p_ = b;
      if (!tname.empty() && At(b + tname.size()) == '[')
        return FailExpected(b, "an element type such as f32, bf16, s32 or pred");
      return FailExpected(b, "a shape such as f32[8,16] or (f32[2], s32[])");
    }
    *s = Shape();
    s->type = *type;
    if (Cur() != '[') {
      if (*type == PrimitiveType::kToken || *type == PrimitiveType::kOpaque) return true;
      return FailExpected(p_, "'[' after element type '" + std::string(tname) + "'");
    }
    ++p_;
    bool any_dynamic = false;
    SkipWs();
    if (Cur() != ']') {
      while (true) {
        SkipWs();
        bool dynamic = false;
        if (Cur() == '<' && At(p_ + 1) == '=') {
          dynamic = any_dynamic = true;
          p_ += 2;
        } else if (Cur() == '?') {
          return Fail(p_, "expected a dimension size, found '?' (unbounded dynamic dimensions are not supported)");
        }
        int64_t v;
        if (!ParseNonNegative(&v, "a dimension size")) return false;
        s->dims.push_back(v);
        s->dynamic_dims.push_back(dynamic);
        SkipWs();
        if (Cur() == ',') {
          ++p_;
          continue;
        }
        if (Cur() == ']') break;
        return FailExpected(p_, "',' or ']' in shape dimensions");
      }
    }
    ++p_;  // ']'
    if (!any_dynamic) s->dynamic_dims.clear();
    if (*type == PrimitiveType::kToken) return true;
    // A layout must follow ']' directly: "-> f32[2] {" opens a computation body, not a layout.
    if (Cur() == '{') {
      const size_t lb = p_;
      ++p_;
      s->has_layout = true;
      SkipWs();
      while (Cur() != '}' && Cur() != ':') {
        int64_t v;
        if (!ParseNonNegative(&v, "a dimension number in the layout")) return false;
        s->minor_to_major.push_back(v);
        SkipWs();
        if (Cur() == ',') {
          ++p_;
          SkipWs();
        } else if (Cur() != '}' && Cur() != ':') {
          return FailExpected(p_, "',' or '}' in the layout");
        }
      }
      if (Cur() == ':') {
        const size_t xb = p_;
        int depth_in = 0;
        while (p_ < t_.size()) {
          const char c = t_[p_];
          if (c == '(' || c == '{') ++depth_in;
          else if (c == ')' || (c == '}' && depth_in > 0)) --depth_in;
          else if (c == '}') break;
          ++p_;
        }
        if (Cur() != '}') return FailExpected(p_, "'}' to close the layout opened at " + Where(lb));
        s->layout_extra.assign(t_.substr(xb, p_ - xb));
      }
      ++p_;  // '}'
      if (!s->minor_to_major.empty() && s->minor_to_major.size() != s->dims.size())
        return Fail(lb, "expected " + Plural(s->dims.size(), "layout entry", "layout entries") +
                            " (one per dimension), found " + std::to_string(s->minor_to_major.size()));
    }
    return true;
  }

  // ---- module ---------------------------------------------------------------------------------

  bool ParseModule() {
    SkipWs();
    std::vector<std::string_view> seen;
    const bool has_header = PeekKeyword("HloModule");
    if (!has_header) {
      // XLA also accepts a module without header: just its computations.
      if (!(Cur() == '%' || (IsNameChar(Cur()) && Cur() != '-')))
        return FailExpected(p_, "'HloModule' or a computation");
      module_ = std::make_unique<Module>("module");
    } else {
      p_ += 9;
      SkipWs();
      size_t noff = p_;
      auto name = ReadNameChars();
      if (name.empty()) return FailExpected(noff, "a module name after 'HloModule'");
      module_ = std::make_unique<Module>(std::string(name));
    }
    while (has_header && Eat(',')) {
      SkipWs();
      const size_t koff = p_;
      auto key = ReadNameChars();
      if (key.empty()) return FailExpected(koff, "a module attribute name");
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        return Fail(koff, "duplicate module attribute '" + std::string(key) + "'");
      seen.push_back(key);
      if (!Expect('=', "'=' after module attribute '" + std::string(key) + "'")) return false;
      if (key == "is_scheduled") {
        if (!ParseBool(&module_->is_scheduled)) return false;
      } else if (key == "num_partitions" || key == "replica_count") {
        SkipWs();
        const size_t voff = p_;
        int64_t v;
        if (!ParseNonNegative(&v, "a positive integer for " + std::string(key))) return false;
        if (v < 1) return Fail(voff, "expected a positive integer for " + std::string(key) + ", found 0");
        (key == "num_partitions" ? module_->num_partitions : module_->num_replicas) = v;
      } else if (key == "entry_computation_layout") {
        if (!ParseBracedText(&module_->entry_computation_layout, "the entry computation layout")) return false;
      } else {
        std::string_view value;
        if (!ScanRawValue(&value)) return false;
        module_->header_attributes.push_back({std::string(key), std::string(value)});
      }
    }
    if (AtStackFrameTables() && !ParseStackFrameTables()) return false;
    while (true) {
      SkipWs();
      if (p_ >= t_.size()) break;
      if (!ParseComputation()) return false;
    }
    if (module_->computations().empty()) return FailExpected(p_, "a computation");
    if (!module_->entry()) module_->set_entry(module_->computations().back().get());
    return true;
  }

  // ---- stack-frame index (FileNames / FunctionNames / FileLocations / StackFrames) --------------

  // "FileNames" opens the tables when an entry or the next table follows (a computation could be
  // named FileNames too: then '{' or '(' follows).
  bool AtStackFrameTables() {
    if (!PeekKeyword("FileNames")) return false;
    const size_t save = p_;
    p_ += 9;
    SkipWs();
    const bool tables = IsDigit(Cur()) || PeekKeyword("FunctionNames") || p_ >= t_.size();
    p_ = save;
    return tables;
  }

  // Entries "N value" while a number comes next; `entry` parses the value.
  template <typename Entry>
  bool ParseTableEntries(std::string_view table, Entry&& entry) {
    while (true) {
      SkipWs();
      if (!IsDigit(Cur())) return true;
      int64_t ignored;  // XLA numbers entries by position; the written id is not used
      if (!ParseNonNegative(&ignored, "an entry number in ", table)) return false;
      if (!entry()) return false;
    }
  }

  bool ParseStringTable(std::vector<std::string>* out, std::string_view table) {
    return ParseTableEntries(table, [&] {
      SkipWs();
      if (Cur() != '"') return FailExpected(p_, "a quoted string in ", table);
      out->emplace_back();
      return ScanString(&out->back());
    });
  }

  // '{' key=int (' '|',' key=int)* '}' — `set` stores a known key, returns false for an unknown one
  // (skipped: a later XLA may add fields).
  template <typename Set>
  bool ParseIntRecord(std::string_view table, Set&& set) {
    if (!Expect('{', "'{' to start an entry of ", table)) return false;
    while (true) {
      SkipWs();
      if (Cur() == '}') {
        ++p_;
        return true;
      }
      if (Cur() == ',') {
        ++p_;
        continue;
      }
      const size_t koff = p_;
      const std::string_view key = ReadNameChars();
      if (key.empty()) return FailExpected(koff, "a field name or '}' in ", table);
      if (!Expect('=', "'=' after '", key, "'")) return false;
      int64_t v;
      if (!ParseInt(&v, "an integer for ", true, key)) return false;
      set(key, v);
    }
  }

  bool ExpectTable(std::string_view keyword) {
    if (PeekKeyword(keyword)) {
      p_ += keyword.size();
      return true;
    }
    return FailExpected(p_, "'", keyword, "' (the stack-frame tables come in the order FileNames, FunctionNames, FileLocations, StackFrames)");
  }

  bool ParseStackFrameTables() {
    StackFrameIndex& idx = module_->stack_frames;
    p_ += 9;  // FileNames
    if (!ParseStringTable(&idx.file_names, "FileNames")) return false;
    if (!ExpectTable("FunctionNames") || !ParseStringTable(&idx.function_names, "FunctionNames")) return false;
    if (!ExpectTable("FileLocations")) return false;
    if (!ParseTableEntries("FileLocations", [&] {
          FileLocation fl;
          const bool ok = ParseIntRecord("FileLocations", [&](std::string_view k, int64_t v) {
            if (k == "file_name_id") fl.file_name_id = v;
            else if (k == "function_name_id") fl.function_name_id = v;
            else if (k == "line") fl.line = v;
            else if (k == "end_line") fl.end_line = v;
            else if (k == "column") fl.column = v;
            else if (k == "end_column") fl.end_column = v;
          });
          idx.file_locations.push_back(fl);
          return ok;
        }))
      return false;
    if (!ExpectTable("StackFrames")) return false;
    return ParseTableEntries("StackFrames", [&] {
      StackFrame f;
      const bool ok = ParseIntRecord("StackFrames", [&](std::string_view k, int64_t v) {
        if (k == "file_location_id") f.file_location_id = v;
        else if (k == "parent_frame_id") f.parent_frame_id = v;
      });
      idx.stack_frames.push_back(f);
      return ok;
    });
  }

  // ---- computations ---------------------------------------------------------------------------

  // (',' key '=' value)* — execution_thread="..." is typed, anything else kept verbatim.
  bool ParseComputationAttributes(std::string* execution_thread, std::vector<RawAttribute>* raw) {
    while (true) {
      SkipWs();
      if (Cur() != ',') return true;
      ++p_;
      SkipWs();
      const size_t koff = p_;
      auto key = ReadNameChars();
      if (key.empty()) return FailExpected(koff, "a computation attribute name");
      if (!Expect('=', "'=' after '", key, "'")) return false;
      SkipWs();
      if (key == "execution_thread" && Cur() == '"') {
        execution_thread->clear();
        if (!ScanString(execution_thread)) return false;
        continue;
      }
      std::string_view value;
      if (!ScanRawValue(&value)) return false;
      raw->push_back({std::string(key), std::string(value)});
    }
  }

  bool ParseComputation() {
    SkipWs();
    const size_t start = p_;
    bool is_entry = false;
    if (PeekKeyword("ENTRY")) {
      is_entry = true;
      p_ += 5;
    }
    ComputationState st;
    if (!ParseName(&st.name, &st.name_offset, is_entry ? "a computation name after ENTRY" : "a computation name"))
      return false;
    if (auto it = comp_by_name_.find(st.name); it != comp_by_name_.end())
      return Fail(st.name_offset, "redefinition of computation '" + std::string(st.name) + "' (first defined at " +
                                      Where(comp_offsets_[std::string(st.name)]) + ")");
    SkipWs();
    if (Cur() == '(' && !ParseSignature()) return false;
    // Computation attributes: XLA writes them after the closing '}'; accepted before '{' too.
    std::string execution_thread;
    std::vector<RawAttribute> comp_attrs;
    if (!ParseComputationAttributes(&execution_thread, &comp_attrs)) return false;
    if (!Expect('{', "'{' to start the body of computation '" + std::string(st.name) + "'")) return false;
    if (is_entry && module_->entry())
      return Fail(start, "expected one ENTRY computation, found a second (the first is '" + module_->entry()->name() +
                             "')");
    st.comp = module_->AddComputation(std::string(st.name), is_entry);
    comp_by_name_.emplace(st.name, st.comp);
    comp_offsets_.emplace(std::string(st.name), st.name_offset);
    while (true) {
      SkipWs();
      if (Cur() == '}') {
        if (!st.last) return FailExpected(p_, "an instruction in computation '" + std::string(st.name) + "'");
        ++p_;
        break;
      }
      if (p_ >= t_.size())
        return FailExpected(p_, "'}' to close computation '" + std::string(st.name) + "'");
      if (!ParseInstruction(st)) return false;
    }
    st.comp->set_root(st.root ? st.root : st.last);
    if (!ParseComputationAttributes(&execution_thread, &comp_attrs)) return false;
    st.comp->execution_thread = std::move(execution_thread);
    st.comp->raw_attributes = std::move(comp_attrs);
    return CheckParameters(st);
  }

  // '(' (name ':' shape (',' name ':' shape)*)? ')' '->' shape. Checked for syntax only: XLA
  // derives the signature from the parameters and the root.
  bool ParseSignature() {
    ++p_;  // '('
    if (!Eat(')')) {
      while (true) {
        std::string_view pname;
        size_t poff;
        if (!ParseName(&pname, &poff, "a parameter name in the computation signature")) return false;
        if (!Expect(':', "':' after parameter '" + std::string(pname) + "'")) return false;
        Shape ignored;
        if (!ParseShape(&ignored, 0)) return false;
        SkipWs();
        if (Cur() == ',') {
          ++p_;
          continue;
        }
        if (Cur() == ')') {
          ++p_;
          break;
        }
        return FailExpected(p_, "',' or ')' in the computation signature");
      }
    }
    SkipWs();
    if (!(Cur() == '-' && At(p_ + 1) == '>')) return FailExpected(p_, "'->' and the result shape");
    p_ += 2;
    Shape ignored;
    return ParseShape(&ignored, 0);
  }

  bool CheckParameters(const ComputationState& st) {
    const size_t n = st.params.size();
    std::vector<size_t> first(n, SIZE_MAX);
    bool in_order = true;
    for (size_t i = 0; i < n; ++i) {
      const auto [inst, off] = st.params[i];
      const int64_t num = inst->parameter_number;
      if (num < 0 || static_cast<size_t>(num) >= n)
        return Fail(off, "expected a parameter number below " + std::to_string(n) + " (computation '" +
                             std::string(st.name) + "' has " + std::to_string(n) + " parameters), found " +
                             std::to_string(num));
      if (first[static_cast<size_t>(num)] != SIZE_MAX)
        return Fail(off, "duplicate parameter number " + std::to_string(num) + " (first used at " +
                             Where(first[static_cast<size_t>(num)]) + ")");
      first[static_cast<size_t>(num)] = off;
      if (static_cast<size_t>(num) != i) in_order = false;
    }
    if (!in_order) needs_parameter_fixup_ = true;
    return true;
  }

  // ---- instructions ---------------------------------------------------------------------------

  // XLA's list of opcodes whose result shape may be left out of the text.
  static bool CanInferShape(Opcode op) {
    switch (op) {
      case Opcode::kConvert: case Opcode::kBitcastConvert: case Opcode::kReducePrecision:
      case Opcode::kStochasticConvert:
        return false;
      case Opcode::kBroadcast: case Opcode::kCall: case Opcode::kConcatenate: case Opcode::kConditional:
      case Opcode::kConvolution: case Opcode::kCopy: case Opcode::kDot: case Opcode::kDomain:
      case Opcode::kGather: case Opcode::kGetDimensionSize: case Opcode::kSetDimensionSize:
      case Opcode::kGetTupleElement: case Opcode::kMap: case Opcode::kPad: case Opcode::kPartitionId:
      case Opcode::kReplicaId: case Opcode::kReduce: case Opcode::kReduceWindow: case Opcode::kReverse:
      case Opcode::kScatter: case Opcode::kSelect: case Opcode::kSelectAndScatter: case Opcode::kSort:
      case Opcode::kTranspose: case Opcode::kTuple: case Opcode::kWhile: case Opcode::kOptimizationBarrier:
      case Opcode::kAfterAll: case Opcode::kClamp: case Opcode::kCompare:
        return true;
      default:
        return IsElementwise(op);
    }
  }

  static bool CheckOperandCount(Opcode op, size_t n, std::string* expected) {
    auto exact = [&](size_t k) {
      if (n == k) return true;
      *expected = std::to_string(k) + (k == 1 ? " operand" : " operands");
      return false;
    };
    auto at_least = [&](size_t k) {
      if (n >= k) return true;
      *expected = "at least " + std::to_string(k) + (k == 1 ? " operand" : " operands");
      return false;
    };
    switch (op) {
      case Opcode::kParameter: case Opcode::kConstant: case Opcode::kIota: case Opcode::kPartitionId:
      case Opcode::kReplicaId:
        return exact(0);
      case Opcode::kTuple: case Opcode::kAfterAll: case Opcode::kCall: case Opcode::kCustomCall:
      case Opcode::kGeneric:
        return true;
      case Opcode::kSelect: case Opcode::kClamp: case Opcode::kSelectAndScatter:
        return exact(3);
      case Opcode::kDot: case Opcode::kConvolution: case Opcode::kPad: case Opcode::kGather:
      case Opcode::kOutfeed: case Opcode::kSend: case Opcode::kSetDimensionSize:
        return exact(2);
      case Opcode::kRng: case Opcode::kInfeed: case Opcode::kRecv:
        if (n <= (op == Opcode::kRng ? 2u : 1u)) return true;
        *expected = op == Opcode::kRng ? "at most 2 operands" : "at most 1 operand";
        return false;
      case Opcode::kBitcast: case Opcode::kBroadcast: case Opcode::kReshape: case Opcode::kTranspose:
      case Opcode::kReverse: case Opcode::kSlice: case Opcode::kGetTupleElement: case Opcode::kWhile:
      case Opcode::kSendDone: case Opcode::kRecvDone:
      case Opcode::kCopyStart: case Opcode::kCopyDone: case Opcode::kAllReduceDone:
      case Opcode::kAllGatherDone: case Opcode::kCollectivePermuteDone: case Opcode::kDomain:
      case Opcode::kOptimizationBarrier: case Opcode::kGetDimensionSize:
        return exact(1);
      case Opcode::kDynamicSlice:
        return at_least(2);
      case Opcode::kDynamicUpdateSlice: return at_least(3);
      case Opcode::kConditional:
        return at_least(2);
      case Opcode::kConcatenate: case Opcode::kSort: case Opcode::kMap:
      case Opcode::kAllReduce: case Opcode::kAllReduceStart: case Opcode::kAllGather:
      case Opcode::kAllGatherStart: case Opcode::kReduceScatter: case Opcode::kAllToAll:
        return at_least(1);
      case Opcode::kReduce: case Opcode::kReduceWindow:
        if (n >= 2 && n % 2 == 0) return true;
        *expected = "an even number of operands (inputs, then as many init values)";
        return false;
      case Opcode::kScatter:
        if (n >= 3 && n % 2 == 1) return true;
        *expected = "an odd number of operands, at least 3 (operands, indices, updates)";
        return false;
      case Opcode::kCollectivePermute: case Opcode::kCollectivePermuteStart:
        if (n == 1 || n == 4) return true;
        *expected = "1 or 4 operands";
        return false;
      default:
        break;
    }
    if (IsElementwiseBinary(op)) return exact(2);
    if (IsElementwiseUnary(op)) return exact(1);
    return true;
  }

  bool ParseInstruction(ComputationState& st) {
    SkipWs();
    const size_t start = p_;
    bool is_root = false;
    if (PeekKeyword("ROOT")) {
      // "ROOT = ..." would be an instruction named ROOT.
      size_t save = p_;
      p_ += 4;
      SkipWs();
      if (Cur() == '=') p_ = save;
      else is_root = true;
    }
    std::string_view name;
    size_t name_off;
    if (!ParseName(&name, &name_off, "an instruction name or '}'")) return false;
    if (const NameEntry* prev = st.names.Find(name))
      return Fail(name_off, "redefinition of instruction '" + std::string(name) + "' (first defined at " +
                                Where(prev->offset) + ")");
    if (!Expect('=', "'=' after instruction name '", name, "'")) return false;
    // The result shape may be omitted where XLA can infer it ("ROOT t = tuple(a, b)").
    Shape shape;
    bool shape_given = true;
    SkipWs();
    if (Cur() != '(') {
      size_t e = p_;
      while (e < t_.size() && (IsAlpha(t_[e]) || IsDigit(t_[e]))) ++e;
      const auto type = PrimitiveTypeFromName(t_.substr(p_, e - p_));
      const bool is_type = type && (At(e) == '[' || *type == PrimitiveType::kToken || *type == PrimitiveType::kOpaque);
      if (!is_type && At(e) != '[') shape_given = false;
    }
    if (shape_given && !ParseShape(&shape, 0)) return false;
    SkipWs();
    const size_t op_off = p_;
    while (p_ < t_.size() && (IsAlpha(t_[p_]) || IsDigit(t_[p_]) || t_[p_] == '-' || t_[p_] == '_')) ++p_;
    const std::string_view opcode_text = t_.substr(op_off, p_ - op_off);
    if (opcode_text.empty()) return FailExpected(op_off, "an opcode");
    const std::optional<Opcode> known = OpcodeFromName(opcode_text);
    const Opcode op = known ? *known : Opcode::kGeneric;
    if (!shape_given && !CanInferShape(op))
      return FailExpected(op_off, "a result shape such as f32[8] before '" + std::string(opcode_text) +
                                      "' (its shape cannot be inferred)");
    SkipWs();
    if (Cur() != '(') return FailExpected(p_, "'(' after opcode '" + std::string(opcode_text) + "'");
    const size_t lparen = p_;

    std::vector<Instruction*> operands;
    int64_t param_number = -1;
    size_t param_off = 0;
    std::string_view literal_text;
    size_t literal_off = 0;
    if (op == Opcode::kParameter) {
      ++p_;
      SkipWs();
      param_off = p_;
      if (!ParseNonNegative(&param_number, "a parameter number")) return false;
      if (!Expect(')', "')' after the parameter number")) return false;
    } else if (op == Opcode::kConstant) {
      if (!ScanBalanced()) return false;
      literal_text = t_.substr(lparen + 1, p_ - lparen - 2);
      literal_off = lparen + 1;
      while (!literal_text.empty() && IsSpace(literal_text.front())) {
        literal_text.remove_prefix(1);
        ++literal_off;
      }
      while (!literal_text.empty() && IsSpace(literal_text.back())) literal_text.remove_suffix(1);
      if (literal_text.empty()) return FailExpected(literal_off, "a literal value in constant(...)");
    } else {
      ++p_;
      SkipWs();
      if (Cur() == ')') {
        ++p_;
      } else {
        while (true) {
          Instruction* operand = nullptr;
          if (!ParseOperand(st, &operand)) return false;
          operands.push_back(operand);
          SkipWs();
          if (Cur() == ',') {
            ++p_;
            continue;
          }
          if (Cur() == ')') {
            ++p_;
            break;
          }
          return FailExpected(p_, "',' or ')' in the operand list");
        }
      }
    }
    std::string expected;
    if (!CheckOperandCount(op, operands.size(), &expected))
      return Fail(op_off, "expected " + expected + " for " + std::string(OpcodeName(op)) + ", found " +
                              std::to_string(operands.size()));

    Instruction* inst =
        op == Opcode::kGeneric
            ? st.comp->AddGeneric(std::string(opcode_text), std::move(shape), std::move(operands), std::string(name))
            : st.comp->AddInstruction(op, std::move(shape), std::move(operands), std::string(name));
    const auto id = static_cast<size_t>(inst->id());
    if (inst_offsets_.size() <= id) inst_offsets_.resize(id + 1, 0);
    inst_offsets_[id] = name_off;
    if (op == Opcode::kParameter) {
      inst->parameter_number = param_number;
      st.params.emplace_back(inst, param_off);
    } else if (op == Opcode::kConstant) {
      inst->literal.text.assign(literal_text);
      if (!FillLiteralValues(inst, literal_text, literal_off)) return false;
    }

    // Attributes.
    CalledRefs refs;
    KeySet seen;
    while (true) {
      SkipWs();
      if (Cur() != ',') break;
      ++p_;
      if (!ParseAttribute(st, inst, &refs, &seen)) return false;
    }
    if (!FinishAttributes(inst, op_off, refs, seen)) return false;
    if (!shape_given) pending_shapes_.emplace_back(inst, op_off);

    st.names.Insert(name, NameEntry{inst, name_off});
    st.last = inst;
    if (is_root) {
      if (st.root)
        return Fail(start, "expected one ROOT in computation '" + std::string(st.name) +
                               "', found a second (the first is at " + Where(st.root_offset) + ")");
      st.root = inst;
      st.root_offset = start;
    }
    return true;
  }

  // operand ::= shape? name
  bool ParseOperand(ComputationState& st, Instruction** out) {
    SkipWs();
    const size_t off = p_;
    std::optional<Shape> declared;
    if (Cur() == '(') {
      declared.emplace();
      if (!ParseShape(&*declared, 0)) return false;
    } else {
      // An element type directly followed by '[' starts a shape ("f32[8] %x", "token[] %t").
      size_t e = p_;
      while (e < t_.size() && (IsAlpha(t_[e]) || IsDigit(t_[e]))) ++e;
      if (e > p_ && At(e) == '[' && PrimitiveTypeFromName(t_.substr(p_, e - p_))) {
        declared.emplace();
        if (!ParseShape(&*declared, 0)) return false;
      }
    }
    std::string_view name;
    size_t noff;
    if (!ParseName(&name, &noff, "an operand name")) return false;
    const NameEntry* def = st.names.Find(name);
    if (!def) return FailUndefined(st, name, noff, "operand");
    if (declared && def->inst->shape().type != PrimitiveType::kInvalid && !declared->Compatible(def->inst->shape()))
      return Fail(off, "expected operand shape " + def->inst->shape().ToString() + " (the shape of '" +
                           std::string(name) + "'), found " + declared->ToString());
    *out = def->inst;
    return true;
  }

  // An undefined name: say whether it is defined later in this computation (XLA requires
  // definition before use) or nowhere.
  bool FailUndefined(const ComputationState& st, std::string_view name, size_t off, std::string_view role) {
    // Look ahead (textually, within this computation) for "name =".
    size_t pos = p_;
    while (true) {
      pos = t_.find(name, pos);
      if (pos == std::string_view::npos) break;
      const size_t end = pos + name.size();
      const char before = pos > 0 ? t_[pos - 1] : '\n';
      size_t k = end;
      while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t')) ++k;
      if ((before == '%' || IsSpace(before)) && !IsNameChar(At(end)) && At(k) == '=' && At(k + 1) != '=') {
        if (EndOfComputationGuess() > pos)
          return Fail(off, "expected " + std::string(role) + " '" + std::string(name) +
                               "' to be defined before use, found its definition later, at " +
                               Where(before == '%' ? pos - 1 : pos));
        break;
      }
      pos = end;
    }
    return Fail(off, "expected " + std::string(role) + " to name an instruction of computation '" +
                         std::string(st.name) + "', found undefined '" + std::string(name) + "'");
  }

  // Where the current computation probably ends: the first line after p_ whose first non-blank
  // character is '}'. Only used to word an error message.
  size_t EndOfComputationGuess() const {
    size_t pos = p_;
    while (true) {
      pos = t_.find('\n', pos);
      if (pos == std::string_view::npos) return t_.size();
      size_t k = pos + 1;
      while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\r')) ++k;
      if (k < t_.size() && t_[k] == '}') return k;
      pos = k;
    }
  }

  bool FillLiteralValues(Instruction* inst, std::string_view text, size_t text_off) {
    const Shape& s = inst->shape();
    if (!s.IsArray() || IsComplex(s.type) || s.type == PrimitiveType::kOpaque) return true;
    if (text.find("...") != std::string_view::npos) return true;  // elided large literal "{...}"
    std::vector<double> values;
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
      const char c = text[i];
      if (IsSpace(c) || c == '{' || c == '}' || c == ',') {
        ++i;
        continue;
      }
      const size_t b = i;
      while (i < n && !IsSpace(text[i]) && text[i] != '{' && text[i] != '}' && text[i] != ',') ++i;
      std::string_view tok = text.substr(b, i - b);
      double v = 0;
      if (tok == "true") {
        v = 1;
      } else if (tok == "false") {
        v = 0;
      } else {
        std::string_view num = tok;
        if (!num.empty() && num.front() == '+') num.remove_prefix(1);
        auto r = std::from_chars(num.data(), num.data() + num.size(), v);
        if (r.ec == std::errc::result_out_of_range) {
          v = (num.front() == '-') ? -HUGE_VAL : HUGE_VAL;
        } else if (r.ec != std::errc() || r.ptr != num.data() + num.size()) {
          return Fail(text_off + b, "expected a number in the constant, found '" +
                                        std::string(tok.substr(0, 30)) + "'");
        }
      }
      values.push_back(v);
    }
    const int64_t count = s.ElementCount();
    if (values.size() == 1 && count > 1 && text.find('{') == std::string_view::npos) {
      // A scalar written for an array constant fills it (XLA accepts "f32[4] constant(1)"). Very
      // large splats keep the text only.
      if (count <= (int64_t{1} << 20)) inst->literal.values.assign(static_cast<size_t>(count), values[0]);
      return true;
    }
    if (static_cast<int64_t>(values.size()) != count)
      return Fail(text_off, "expected " + std::to_string(count) + (count == 1 ? " value" : " values") + " for a " +
                                s.ToString(false) + " constant, found " + std::to_string(values.size()));
    inst->literal.values = std::move(values);
    return true;
  }

  // ---- attributes -----------------------------------------------------------------------------

  bool ParseNameRef(NameRef* r, std::string_view what, std::string_view what2 = {}) {
    return ParseName(&r->name, &r->offset, what, what2);
  }

  bool ParseNameRefList(std::vector<NameRef>* out, std::string_view what) {
    if (!Expect('{', "'{' to start ", what)) return false;
    return ParseSeparatedUntil('}', what, [&] {
      NameRef r;
      if (!ParseNameRef(&r, "a computation name in ", what)) return false;
      out->push_back(r);
      return true;
    });
  }


  static bool IsComputationKey(std::string_view k) {
    return k == "to_apply" || k == "calls" || k == "condition" || k == "body" || k == "true_computation" ||
           k == "false_computation" || k == "branch_computations" || k == "called_computations" ||
           k == "select" || k == "scatter";
  }

  // Whether a computation-valued key is typed for this opcode (generic: always resolved, also
  // kept raw).
  static bool ComputationKeyApplies(Opcode op, std::string_view k) {
    if (op == Opcode::kGeneric) return true;
    if (k == "to_apply" || k == "calls" || k == "called_computations") return true;
    if (k == "condition" || k == "body") return op == Opcode::kWhile;
    if (k == "true_computation" || k == "false_computation" || k == "branch_computations")
      return op == Opcode::kConditional;
    if (k == "select" || k == "scatter") return op == Opcode::kSelectAndScatter;
    return false;
  }

  bool ParseComputationAttr(std::string_view key, CalledRefs* refs) {
    auto single = [&](std::optional<NameRef>* slot) {
      NameRef r;
      if (!ParseNameRef(&r, "a computation name for ", key)) return false;
      *slot = r;
      return true;
    };
    if (key == "to_apply") return single(&refs->to_apply);
    if (key == "condition") return single(&refs->condition);
    if (key == "body") return single(&refs->body);
    if (key == "true_computation") return single(&refs->true_comp);
    if (key == "false_computation") return single(&refs->false_comp);
    if (key == "select") return single(&refs->select);
    if (key == "scatter") return single(&refs->scatter);
    if (key == "branch_computations") {
      refs->has_branches = true;
      return ParseNameRefList(&refs->branches, "branch_computations");
    }
    // calls / called_computations: a single name or a braced list.
    refs->has_calls = true;
    SkipWs();
    if (Cur() == '{') return ParseNameRefList(&refs->calls, key);
    NameRef r;
    if (!ParseNameRef(&r, "a computation name for ", key)) return false;
    refs->calls.push_back(r);
    return true;
  }

  bool ParseAttribute(ComputationState& st, Instruction* inst, CalledRefs* refs, KeySet* seen) {
    SkipWs();
    const size_t koff = p_;
    const std::string_view key = ReadNameChars();
    if (key.empty()) return FailExpected(koff, "an attribute name");
    if (!Expect('=', "'=' after attribute name '", key, "'")) return false;
    if (!seen->Insert(key)) return Fail(koff, "duplicate attribute '" + std::string(key) + "'");
    SkipWs();
    const size_t voff = p_;
    const Opcode op = inst->opcode();

    if (key == "sharding") return ParseShardingAttr(inst);
    if (key == "metadata") return ParseBracedText(&inst->metadata, "metadata");
    if (key == "frontend_attributes") return ParseBracedText(&inst->frontend_attributes, "frontend_attributes");
    if (key == "backend_config") {
      if (Cur() == '"') {
        if (!ScanString()) return false;
      } else if (Cur() == '{') {
        if (!ScanBalanced()) return false;
      } else {
        std::string_view ignored;  // any other value, kept as written
        if (!ScanRawValue(&ignored)) return false;
      }
      inst->backend_config.assign(t_.substr(voff, p_ - voff));
      return true;
    }
    if (key == "control-predecessors") return ParseControlPredecessors(st, inst);
    if (IsComputationKey(key) && ComputationKeyApplies(op, key)) {
      if (!ParseComputationAttr(key, refs)) return false;
      if (op == Opcode::kGeneric) inst->raw_attributes.push_back({std::string(key), std::string(t_.substr(voff, p_ - voff))});
      return true;
    }
    if (!hlo_internal::IsTypedAttribute(hlo_internal::AttributeOpcode(*inst), key)) {
      std::string_view value;
      if (!ScanRawValue(&value)) return false;
      inst->raw_attributes.push_back({std::string(key), std::string(value)});
      return true;
    }
    return ParseTypedAttribute(inst, key);
  }

  bool ParseTypedAttribute(Instruction* inst, std::string_view key) {
    const Opcode op = inst->opcode();
    if (key == "index") return ParseNonNegative(&inst->tuple_index, "a tuple index");
    if (key == "iota_dimension") return ParseNonNegative(&inst->iota_dimension, "an iota dimension");
    if (key == "dimensions") {
      inst->has_dimensions_attr = true;
      return ParseIntList(&inst->dimensions, "dimensions");
    }
    if (key == "dynamic_slice_sizes") return ParseIntList(&inst->dynamic_slice_sizes, "dynamic_slice_sizes");
    if (key == "slice") return ParseSlice(&inst->slice);
    if (key == "padding") return ParsePadding(&inst->padding);
    if (key == "lhs_batch_dims") return ParseIntList(&inst->dot_dims.lhs_batch, "lhs_batch_dims");
    if (key == "rhs_batch_dims") return ParseIntList(&inst->dot_dims.rhs_batch, "rhs_batch_dims");
    if (key == "lhs_contracting_dims") return ParseIntList(&inst->dot_dims.lhs_contracting, "lhs_contracting_dims");
    if (key == "rhs_contracting_dims") return ParseIntList(&inst->dot_dims.rhs_contracting, "rhs_contracting_dims");
    if (key == "window") {
      inst->has_window = true;
      return ParseWindow(&inst->window);
    }
    if (key == "dim_labels") return ParseDimLabels(&inst->conv_dims);
    if (key == "feature_group_count" || key == "batch_group_count") {
      const size_t off = p_;
      int64_t v;
      if (!ParseNonNegative(&v, "a positive group count")) return false;
      if (v < 1) return Fail(off, "expected a positive " + std::string(key) + ", found 0");
      (key == "feature_group_count" ? inst->feature_group_count : inst->batch_group_count) = v;
      return true;
    }
    // gather
    if (key == "offset_dims") return ParseIntList(&inst->gather_dims.offset_dims, "offset_dims");
    if (key == "collapsed_slice_dims") return ParseIntList(&inst->gather_dims.collapsed_slice_dims, "collapsed_slice_dims");
    if (key == "start_index_map") return ParseIntList(&inst->gather_dims.start_index_map, "start_index_map");
    if (key == "operand_batching_dims") return ParseIntList(&inst->gather_dims.operand_batching_dims, "operand_batching_dims");
    if (key == "start_indices_batching_dims")
      return ParseIntList(&inst->gather_dims.start_indices_batching_dims, "start_indices_batching_dims");
    if (key == "slice_sizes") return ParseIntList(&inst->gather_slice_sizes, "slice_sizes");
    // scatter
    if (key == "update_window_dims") return ParseIntList(&inst->scatter_dims.update_window_dims, "update_window_dims");
    if (key == "inserted_window_dims") return ParseIntList(&inst->scatter_dims.inserted_window_dims, "inserted_window_dims");
    if (key == "scatter_dims_to_operand_dims")
      return ParseIntList(&inst->scatter_dims.scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims");
    if (key == "input_batching_dims") return ParseIntList(&inst->scatter_dims.input_batching_dims, "input_batching_dims");
    if (key == "scatter_indices_batching_dims")
      return ParseIntList(&inst->scatter_dims.scatter_indices_batching_dims, "scatter_indices_batching_dims");
    if (key == "unique_indices") return ParseBool(&inst->unique_indices);
    if (key == "index_vector_dim")
      return ParseNonNegative(op == Opcode::kGather ? &inst->gather_dims.index_vector_dim
                                                    : &inst->scatter_dims.index_vector_dim,
                              "an index vector dimension");
    if (key == "indices_are_sorted") return ParseBool(&inst->indices_are_sorted);
    // compare
    if (key == "direction") {
      const size_t off = p_;
      auto w = ReadNameChars();
      auto d = ComparisonDirectionFromName(w);
      if (!d) {
        p_ = off;
        return FailExpected(off, "a comparison direction (EQ, NE, LT, LE, GT, GE)");
      }
      inst->comparison = *d;
      return true;
    }
    if (key == "type") {
      const size_t off = p_;
      auto w = ReadNameChars();
      if (w.empty()) return FailExpected(off, "a comparison type such as FLOAT or TOTALORDER");
      inst->comparison_type.assign(w);
      return true;
    }
    // collectives
    if (key == "replica_groups") {
      inst->has_replica_groups = true;
      return ParseReplicaGroups(&inst->replica_groups);
    }
    if (key == "source_target_pairs") return ParseSourceTargetPairs(&inst->source_target_pairs);
    if (key == "channel_id") {
      int64_t v;
      if (!ParseNonNegative(&v, "a channel id")) return false;
      inst->channel_id = v;
      return true;
    }
    if (key == "use_global_device_ids") return ParseBool(&inst->use_global_device_ids);
    if (key == "constrain_layout") return ParseBool(&inst->constrain_layout);
    if (key == "custom_call_target") {
      if (Cur() != '"') return FailExpected(p_, "a quoted custom_call_target");
      inst->custom_call_target.clear();
      return ScanString(&inst->custom_call_target);
    }
    if (key == "is_stable") return ParseBool(&inst->is_stable);
    return Fail(p_, "internal: unhandled typed attribute '" + std::string(key) + "'");
  }

  bool ParseShardingAttr(Instruction* inst) {
    SkipWs();
    if (Cur() != '{') return FailExpected(p_, "'{' to start the sharding");
    const size_t b = p_;
    if (!ScanBalanced()) return false;
    const std::string_view text = t_.substr(b, p_ - b);
    // Bound the nesting before handing the text to the (recursive) sharding parser.
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      else if (c == '{' || c == '[' || c == '(') {
        if (++depth > kMaxNesting) return Fail(b + i, "sharding nested deeper than 64 levels");
      } else if (c == '}' || c == ']' || c == ')') {
        --depth;
      }
    }
    // Real modules repeat a few sharding texts many times: parse each distinct text once.
    if (auto it = sharding_cache_.find(text); it != sharding_cache_.end()) {
      inst->set_sharding(it->second);
      return true;
    }
    auto r = HloSharding::Parse(text);
    if (!r.ok()) {
      size_t off = b;
      if (r.error().offset >= 0 && static_cast<size_t>(r.error().offset) <= text.size())
        off = b + static_cast<size_t>(r.error().offset);
      std::string msg = r.error().message;
      if (msg.rfind("error: ", 0) == 0) msg.erase(0, 7);
      return Fail(off, msg.empty() ? "invalid sharding" : msg);
    }
    if (sharding_cache_.size() < 4096) sharding_cache_.emplace(text, *r);
    inst->set_sharding(std::move(r).value());
    return true;
  }

  bool ParseControlPredecessors(ComputationState& st, Instruction* inst) {
    if (!Expect('{', "'{' to start control-predecessors")) return false;
    return ParseSeparatedUntil('}', "control-predecessors", [&] {
      std::string_view name;
      size_t off;
      if (!ParseName(&name, &off, "an instruction name in control-predecessors")) return false;
      const NameEntry* def = st.names.Find(name);
      if (!def) return FailUndefined(st, name, off, "control predecessor");
      inst->control_predecessors.push_back(def->inst);
      return true;
    });
  }

  // slice={[0:4:1], [2:8]}
  bool ParseSlice(SliceSpec* s) {
    *s = SliceSpec();
    if (!Expect('{', "'{' to start the slice")) return false;
    return ParseSeparatedUntil('}', "the slice", [&] {
      if (!Expect('[', "'[' to start a slice range such as [0:4:1]")) return false;
      int64_t start, limit, stride = 1;
      if (!ParseNonNegative(&start, "a slice start")) return false;
      if (!Expect(':', "':' after the slice start")) return false;
      if (!ParseNonNegative(&limit, "a slice limit")) return false;
      if (Eat(':')) {
        SkipWs();
        const size_t off = p_;
        if (!ParseNonNegative(&stride, "a slice stride")) return false;
        if (stride < 1) return Fail(off, "expected a positive slice stride, found 0");
      }
      if (!Expect(']', "']' to end the slice range")) return false;
      s->starts.push_back(start);
      s->limits.push_back(limit);
      s->strides.push_back(stride);
      return true;
    });
  }

  // padding=0_0x1_2_0  (low_high[_interior] per dimension, 'x'-separated; empty for rank 0)
  bool ParsePadding(std::vector<PaddingDim>* out) {
    out->clear();
    SkipWs();
    if (!(IsDigit(Cur()) || Cur() == '-')) {
      if (Cur() == ',' || Cur() == '\0' || Cur() == '}' || IsSpace(Cur())) return true;  // rank 0
      return FailExpected(p_, "padding such as 0_0x1_2");
    }
    while (true) {
      PaddingDim d;
      if (!ParseInt(&d.low, "a low padding", true)) return false;
      if (Cur() != '_') return FailExpected(p_, "'_' between low and high padding");
      ++p_;
      if (!ParseInt(&d.high, "a high padding", true)) return false;
      if (Cur() == '_') {
        ++p_;
        if (!ParseNonNegative(&d.interior, "an interior padding")) return false;
      }
      out->push_back(d);
      if (Cur() != 'x') return true;
      ++p_;
    }
  }

  bool ParseXList(std::vector<int64_t>* out, std::string_view what, bool allow_negative) {
    out->clear();
    while (true) {
      int64_t v;
      if (!ParseInt(&v, what, allow_negative)) return false;
      out->push_back(v);
      if (Cur() != 'x') return true;
      ++p_;
    }
  }

  // window={size=3x3 stride=2x1 pad=1_1x0_0 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x1}
  bool ParseWindow(Window* w) {
    *w = Window();
    SkipWs();
    const size_t open = p_;
    if (!Expect('{', "'{' to start the window")) return false;
    std::vector<int64_t> size, stride, lhs, rhs, rev, pad_lo, pad_hi;
    size_t off_stride = 0, off_lhs = 0, off_rhs = 0, off_rev = 0, off_pad = 0;
    bool has_size = false, has_stride = false, has_lhs = false, has_rhs = false, has_rev = false, has_pad = false;
    while (true) {
      SkipWs();
      if (Cur() == '}') {
        ++p_;
        break;
      }
      const size_t koff = p_;
      auto k = ReadNameChars();
      if (k.empty()) return FailExpected(koff, "a window field (size, stride, pad, lhs_dilate, rhs_dilate, rhs_reversal) or '}'");
      if (Cur() != '=') return FailExpected(p_, "'=' after window field '" + std::string(k) + "'");
      ++p_;
      auto dup = [&](bool* flag) {
        if (*flag) return Fail(koff, "duplicate window field '" + std::string(k) + "'");
        *flag = true;
        return true;
      };
      if (k == "size") {
        if (!dup(&has_size) || !ParseXList(&size, "a window size", false)) return false;
      } else if (k == "stride") {
        off_stride = koff;
        if (!dup(&has_stride) || !ParseXList(&stride, "a window stride", false)) return false;
      } else if (k == "lhs_dilate") {
        off_lhs = koff;
        if (!dup(&has_lhs) || !ParseXList(&lhs, "an lhs dilation", false)) return false;
      } else if (k == "rhs_dilate") {
        off_rhs = koff;
        if (!dup(&has_rhs) || !ParseXList(&rhs, "an rhs dilation", false)) return false;
      } else if (k == "rhs_reversal") {
        off_rev = koff;
        if (!dup(&has_rev) || !ParseXList(&rev, "a window reversal (0 or 1)", false)) return false;
      } else if (k == "pad") {
        off_pad = koff;
        if (!dup(&has_pad)) return false;
        while (true) {
          int64_t lo, hi;
          if (!ParseInt(&lo, "a low window padding", true)) return false;
          if (Cur() != '_') return FailExpected(p_, "'_' between low and high window padding");
          ++p_;
          if (!ParseInt(&hi, "a high window padding", true)) return false;
          pad_lo.push_back(lo);
          pad_hi.push_back(hi);
          if (Cur() != 'x') break;
          ++p_;
        }
      } else {
        return FailExpected(koff, "a window field (size, stride, pad, lhs_dilate, rhs_dilate, rhs_reversal)");
      }
    }
    if (!has_size) {
      if (has_stride || has_lhs || has_rhs || has_rev || has_pad)
        return Fail(open, "expected size= in the window, found none");
      return true;  // window={}
    }
    const size_t n = size.size();
    auto check = [&](bool has, const std::vector<int64_t>& v, size_t off, const char* field) {
      if (!has || v.size() == n) return true;
      return Fail(off, "expected " + std::to_string(n) + " values for window " + field +
                           " (one per window dimension), found " + std::to_string(v.size()));
    };
    if (!check(has_stride, stride, off_stride, "stride") || !check(has_lhs, lhs, off_lhs, "lhs_dilate") ||
        !check(has_rhs, rhs, off_rhs, "rhs_dilate") || !check(has_rev, rev, off_rev, "rhs_reversal") ||
        !check(has_pad, pad_lo, off_pad, "pad"))
      return false;
    w->dims.resize(n);
    for (size_t i = 0; i < n; ++i) {
      auto& d = w->dims[i];
      d.size = size[i];
      if (has_stride) d.stride = stride[i];
      if (has_lhs) d.base_dilation = lhs[i];
      if (has_rhs) d.window_dilation = rhs[i];
      if (has_rev) d.window_reversal = rev[i] != 0;
      if (has_pad) {
        d.padding_low = pad_lo[i];
        d.padding_high = pad_hi[i];
      }
    }
    return true;
  }

  // dim_labels=b01f_01io->b01f
  bool ParseDimLabels(ConvolutionDimensionNumbers* d) {
    SkipWs();
    const size_t b = p_;
    while (p_ < t_.size() && (IsAlpha(t_[p_]) || IsDigit(t_[p_]) || t_[p_] == '_' || t_[p_] == '-' || t_[p_] == '>'))
      ++p_;
    const std::string_view text = t_.substr(b, p_ - b);
    auto bad = [&]() {
      p_ = b;
      if (text.empty()) return FailExpected(b, "dim_labels such as b01f_01io->b01f");
      return Fail(b, "expected dim_labels such as b01f_01io->b01f, found '" + std::string(text.substr(0, 40)) + "'");
    };
    const auto us = text.find('_');
    const auto arrow = text.find("->");
    if (us == std::string_view::npos || arrow == std::string_view::npos || us > arrow) return bad();
    auto labels = [](std::string_view s, char a, char bch, int64_t* pa, int64_t* pb, std::vector<int64_t>* spatial) {
      *pa = *pb = -1;
      const size_t k = s.size() < 2 ? 0 : s.size() - 2;
      if (s.size() < 2 || k > 10) return false;
      spatial->assign(k, -1);
      for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const auto pos = static_cast<int64_t>(i);
        if (c == a && *pa < 0) *pa = pos;
        else if (c == bch && *pb < 0) *pb = pos;
        else if (IsDigit(c) && static_cast<size_t>(c - '0') < k && (*spatial)[static_cast<size_t>(c - '0')] < 0)
          (*spatial)[static_cast<size_t>(c - '0')] = pos;
        else return false;
      }
      return *pa >= 0 && *pb >= 0;
    };
    ConvolutionDimensionNumbers c;
    if (!labels(text.substr(0, us), 'b', 'f', &c.input_batch, &c.input_feature, &c.input_spatial) ||
        !labels(text.substr(us + 1, arrow - us - 1), 'i', 'o', &c.kernel_input_feature, &c.kernel_output_feature,
                &c.kernel_spatial) ||
        !labels(text.substr(arrow + 2), 'b', 'f', &c.output_batch, &c.output_feature, &c.output_spatial) ||
        c.input_spatial.size() != c.kernel_spatial.size() || c.input_spatial.size() != c.output_spatial.size())
      return bad();
    *d = std::move(c);
    return true;
  }

  // replica_groups={{0,1},{2,3}} | {} | [2,2]<=[4] | [2,2]<=[2,2]T(1,0)
  bool ParseReplicaGroups(ReplicaGroups* g) {
    *g = ReplicaGroups();
    SkipWs();
    const size_t b = p_;
    if (Cur() == '[') {
      std::vector<int64_t> dims, reshape, perm;
      if (!ParseBracketList(&dims, '[', ']', "the replica group dimensions")) return false;
      if (!(Cur() == '<' && At(p_ + 1) == '=')) return FailExpected(p_, "'<=' in iota replica groups");
      p_ += 2;
      if (!ParseBracketList(&reshape, '[', ']', "the iota reshape dimensions")) return false;
      if (Cur() == 'T') {
        ++p_;
        if (!ParseBracketList(&perm, '(', ')', "the iota transpose permutation")) return false;
      }
      if (dims.size() != 2)
        return Fail(b, "expected replica group dimensions [num_groups,group_size], found " + std::to_string(dims.size()) +
                           " dimensions");
      auto product = [](const std::vector<int64_t>& v) {
        int64_t p = 1;
        for (int64_t x : v) {
          if (x != 0 && p > kMaxIotaElements / x) return kMaxIotaElements + 1;
          p *= x;
        }
        return p;
      };
      const int64_t total = product(dims);
      if (total > kMaxIotaElements) return Fail(b, "expected at most 4194304 devices in iota replica groups, found more");
      if (product(reshape) != total)
        return Fail(b, "expected iota reshape dimensions with " + std::to_string(total) + " elements, found " +
                           std::to_string(product(reshape)));
      if (!perm.empty()) {
        std::vector<bool> used(reshape.size(), false);
        bool ok = perm.size() == reshape.size();
        for (int64_t x : perm) {
          if (!ok || x < 0 || static_cast<size_t>(x) >= reshape.size() || used[static_cast<size_t>(x)]) {
            ok = false;
            break;
          }
          used[static_cast<size_t>(x)] = true;
        }
        if (!ok) {
          std::string list;
          for (size_t i = 0; i < perm.size(); ++i) list += (i ? "," : "") + std::to_string(perm[i]);
          return Fail(b, "expected a permutation of the " + std::to_string(reshape.size()) +
                             " reshape dimensions after T in iota replica groups, found T(" + list + ")");
        }
      }
      // Device list: iota over `reshape`, transposed by `perm`, read row-major.
      std::vector<int64_t> devices(static_cast<size_t>(total));
      const size_t rank = reshape.size();
      if (perm.empty() || rank == 0) {
        for (int64_t i = 0; i < total; ++i) devices[static_cast<size_t>(i)] = i;
      } else {
        std::vector<int64_t> out_dims(rank), in_strides(rank, 1), idx(rank, 0);
        for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * reshape[i];
        for (size_t i = 0; i < rank; ++i) out_dims[i] = reshape[static_cast<size_t>(perm[i])];
        for (int64_t lin = 0; lin < total; ++lin) {
          int64_t src = 0;
          for (size_t i = 0; i < rank; ++i) src += idx[i] * in_strides[static_cast<size_t>(perm[i])];
          devices[static_cast<size_t>(lin)] = src;
          for (size_t i = rank; i-- > 0;) {
            if (++idx[i] < out_dims[i]) break;
            idx[i] = 0;
          }
        }
      }
      const int64_t group_size = dims[1];
      for (int64_t gi = 0; gi < dims[0]; ++gi)
        g->groups.emplace_back(devices.begin() + gi * group_size, devices.begin() + (gi + 1) * group_size);
      g->iota_form = true;
      g->iota_dims = std::move(dims);
      g->iota_reshape = std::move(reshape);
      g->iota_perm = std::move(perm);
      return true;
    }
    if (Cur() != '{') return FailExpected(p_, "replica groups such as {{0,1},{2,3}} or [2,2]<=[4]");
    ++p_;
    return ParseSeparatedUntil('}', "replica_groups", [&] {
      std::vector<int64_t> group;
      if (!ParseIntList(&group, "a replica group")) return false;
      g->groups.push_back(std::move(group));
      return true;
    });
  }

  // source_target_pairs={{0,1},{1,2}}
  bool ParseSourceTargetPairs(std::vector<std::pair<int64_t, int64_t>>* out) {
    out->clear();
    if (!Expect('{', "'{' to start source_target_pairs")) return false;
    return ParseSeparatedUntil('}', "source_target_pairs", [&] {
      std::vector<int64_t> pair;
      SkipWs();
      const size_t off = p_;
      if (!ParseIntList(&pair, "a source-target pair")) return false;
      if (pair.size() != 2)
        return Fail(off, "expected a {source,target} pair of 2 device ids, found " + std::to_string(pair.size()));
      out->emplace_back(pair[0], pair[1]);
      return true;
    });
  }


  // Required attributes and called computations in XLA's order.
  bool FinishAttributes(Instruction* inst, size_t op_off, const CalledRefs& refs,
                        const KeySet& seen) {
    const Opcode op = inst->opcode();
    auto need = [&](std::string_view key) {
      if (seen.Contains(key)) return true;
      return Fail(op_off, "expected attribute " + std::string(key) + "= on " + std::string(OpName(inst)) + ", found none");
    };
    bool ok = true;
    switch (op) {
      case Opcode::kGetTupleElement: ok = need("index"); break;
      case Opcode::kIota: ok = need("iota_dimension"); break;
      case Opcode::kSlice: ok = need("slice"); break;
      case Opcode::kPad: ok = need("padding"); break;
      case Opcode::kDynamicSlice: ok = need("dynamic_slice_sizes"); break;
      case Opcode::kCompare: ok = need("direction"); break;
      case Opcode::kCustomCall: ok = need("custom_call_target"); break;
      case Opcode::kConvolution: ok = need("dim_labels"); break;
      case Opcode::kWhile: ok = need("condition") && need("body"); break;
      case Opcode::kSelectAndScatter: ok = need("select") && need("scatter"); break;
      case Opcode::kReduceWindow: ok = need("window") && need("to_apply"); break;
      case Opcode::kReduce: case Opcode::kMap: case Opcode::kAllReduce: case Opcode::kAllReduceStart:
      case Opcode::kReduceScatter: case Opcode::kSort: case Opcode::kCall:
        ok = need("to_apply");
        break;
      case Opcode::kGather:
        ok = need("offset_dims") && need("collapsed_slice_dims") && need("start_index_map") &&
             need("index_vector_dim") && need("slice_sizes");
        break;
      case Opcode::kScatter:
        ok = need("update_window_dims") && need("inserted_window_dims") && need("scatter_dims_to_operand_dims") &&
             need("index_vector_dim") && need("to_apply");
        break;
      case Opcode::kCollectivePermute: case Opcode::kCollectivePermuteStart:
        ok = need("source_target_pairs");
        break;
      case Opcode::kConditional:
        if (refs.has_branches) {
          if (refs.true_comp || refs.false_comp)
            return Fail(op_off, "expected either branch_computations= or true_computation=/false_computation= on "
                                "conditional, found both");
        } else {
          ok = need("true_computation") && need("false_computation");
        }
        break;
      default:
        break;
    }
    if (!ok) return false;
    if (hlo_internal::RequiresDimensions(op) && !need("dimensions")) return false;

    std::vector<const NameRef*> order;
    if (refs.to_apply) order.push_back(&*refs.to_apply);
    if (refs.condition) order.push_back(&*refs.condition);
    if (refs.body) order.push_back(&*refs.body);
    if (refs.true_comp) order.push_back(&*refs.true_comp);
    if (refs.false_comp) order.push_back(&*refs.false_comp);
    for (const auto& r : refs.branches) order.push_back(&r);
    if (refs.select) order.push_back(&*refs.select);
    if (refs.scatter) order.push_back(&*refs.scatter);
    for (const auto& r : refs.calls) order.push_back(&r);
    if (!order.empty()) {
      auto& called = inst->mutable_called_computations();
      for (const NameRef* r : order) {
        comp_refs_.push_back({inst, called.size(), r->name, r->offset});
        called.push_back(nullptr);
      }
    }
    return true;
  }

  // ---- whole-module checks --------------------------------------------------------------------

  bool ResolveCalls() {
    for (const CompRef& r : comp_refs_) {
      std::string_view n = r.name;
      if (!n.empty() && n.front() == '%') n.remove_prefix(1);
      auto it = comp_by_name_.find(n);
      if (it == comp_by_name_.end())
        return Fail(r.offset, "expected the name of a computation, found unknown computation '" + std::string(n) + "'");
      r.inst->mutable_called_computations()[r.slot] = it->second;
      calls_.push_back({r.inst->parent(), it->second, r.offset});
    }
    return true;
  }

  // XLA's call graph is acyclic; a cycle would make every recursive walk of the module loop.
  bool CheckCallCycles() {
    if (calls_.empty()) return true;
    std::unordered_map<const Computation*, std::vector<size_t>> out;
    for (size_t i = 0; i < calls_.size(); ++i) out[calls_[i].caller].push_back(i);
    std::unordered_map<const Computation*, int> color;  // 0 new, 1 on stack, 2 done
    for (const auto& c : module_->computations()) {
      if (color[c.get()] != 0) continue;
      std::vector<std::pair<const Computation*, size_t>> stack{{c.get(), 0}};
      color[c.get()] = 1;
      while (!stack.empty()) {
        auto& [comp, next] = stack.back();
        auto edges = out.find(comp);
        if (edges == out.end() || next >= edges->second.size()) {
          color[comp] = 2;
          stack.pop_back();
          continue;
        }
        const CallEdge& e = calls_[edges->second[next++]];
        int& col = color[e.callee];
        if (col == 1)
          return Fail(e.offset, "expected an acyclic call graph, found computation '" + e.callee->name() +
                                    "' calling itself (directly or indirectly)");
        if (col == 0) {
          col = 1;
          stack.emplace_back(e.callee, 0);
        }
      }
    }
    return true;
  }

  // Shapes left out of the text, inferred once every called computation is known: callees first,
  // then in instruction order (operands before users).
  bool InferMissingShapes() {
    if (pending_shapes_.empty()) return true;
    std::unordered_map<const Instruction*, size_t> offsets;
    for (const auto& [inst, off] : pending_shapes_) offsets.emplace(inst, off);
    for (Computation* c : module_->MakeComputationPostOrder()) {
      for (const auto& inst : c->instructions()) {
        auto it = offsets.find(inst.get());
        if (it == offsets.end()) continue;
        for (const Instruction* op : inst->operands())
          if (op->shape().type == PrimitiveType::kInvalid)
            return Fail(it->second, "expected a result shape before '" + std::string(OpName(inst.get())) +
                                        "', found none (the shape of operand '" + op->name() + "' is unknown too)");
        auto r = InferShape(*inst);
        if (!r.ok())
          return Fail(it->second, "expected a result shape before '" + std::string(OpName(inst.get())) +
                                      "', found none, and it cannot be inferred: " + r.error().message);
        if (r->type == PrimitiveType::kInvalid)
          return Fail(it->second, "expected a result shape before '" + std::string(OpName(inst.get())) +
                                      "', found none");
        inst->set_shape(std::move(r).value());
      }
    }
    return true;
  }

  struct CallEdge {
    const Computation* caller;
    const Computation* callee;
    size_t offset;
  };

  std::string_view t_;
  std::string filename_;
  size_t p_ = 0;
  bool failed_ = false;
  size_t err_off_ = 0;
  std::string err_msg_;

  std::unique_ptr<Module> module_;
  std::unordered_map<std::string_view, Computation*> comp_by_name_;
  std::unordered_map<std::string, size_t> comp_offsets_;
  std::vector<CompRef> comp_refs_;
  std::vector<CallEdge> calls_;
  std::vector<size_t> inst_offsets_;  // by instruction id
  std::unordered_map<std::string_view, HloSharding> sharding_cache_;  // sharding text -> parsed
  std::vector<std::pair<Instruction*, size_t>> pending_shapes_;  // shape to infer, opcode offset
  bool needs_parameter_fixup_ = false;
};

}  // namespace

Result<std::unique_ptr<Module>> ParseHloModule(std::string_view text, std::string_view filename,
                                               const ParseOptions& options) {
  try {
    Parser parser(text, filename);
    return parser.Run(options);
  } catch (const std::exception& e) {
    return Error(std::string(filename) + ":1:1: error: internal parser failure: " + e.what(), 0);
  } catch (...) {
    return Error(std::string(filename) + ":1:1: error: internal parser failure", 0);
  }
}

Result<ReplicaGroups> ParseReplicaGroupsText(std::string_view text) {
  Parser parser(text, "replica_groups");
  Result<ReplicaGroups> g = parser.RunReplicaGroups();
  if (!g.ok()) return g;
  std::unordered_set<int64_t> seen;
  for (size_t i = 0; i < g->groups.size(); ++i) {
    if (g->groups[i].empty()) return Error("replica group " + std::to_string(i) + " is empty");
    for (int64_t d : g->groups[i]) {
      if (d < 0) return Error("replica group " + std::to_string(i) + " names a negative device id " + std::to_string(d));
      if (!seen.insert(d).second)
        return Error("device " + std::to_string(d) + " appears in more than one replica group (or twice in one)");
    }
  }
  return g;
}

Result<std::vector<std::pair<int64_t, int64_t>>> ParseSourceTargetPairsText(std::string_view text) {
  Parser parser(text, "source_target_pairs");
  auto pairs = parser.RunSourceTargetPairs();
  if (!pairs.ok()) return pairs;
  for (const auto& [s, t] : *pairs)
    if (s < 0 || t < 0) return Error("device ids must be >= 0, found {" + std::to_string(s) + "," + std::to_string(t) + "}");
  return pairs;
}

}  // namespace shardscope
