// Internal helpers shared by the HLO text parser (hlo_parser.cpp) and printer (hlo_printer.cpp):
// character classes and the table of which attribute keys are typed for which opcode. Both sides
// use the same table, so what the printer writes as a typed attribute the parser reads back as one.
// Not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/ir/ir.h"
#include "core/ir/opcodes.h"

namespace shardscope::hlo_internal {

inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
// Characters of instruction / computation / attribute names: [A-Za-z0-9_.-].
inline bool IsNameChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '_' || c == '.' || c == '-'; }

// True when `key=` on an instruction with opcode `op` is parsed into a typed Instruction field
// (everything else is kept verbatim in raw_attributes). Computation-valued keys (to_apply, ...) and
// the universal keys (sharding, metadata, backend_config, frontend_attributes, control-predecessors)
// are handled separately and are not covered here.
bool IsTypedAttribute(Opcode op, std::string_view key);

// The opcode whose typed attributes an instruction carries: its own, or for a generic
// "<collective>-start" that XLA writes for an async-wrapped collective (reduce-scatter-start,
// all-to-all-start) the collective's, so that its replica_groups, channel_id and dimensions are
// typed as on the synchronous op.
Opcode AttributeOpcode(const Instruction& inst);

// Ops that carry dimensions={...} (and the subset for which XLA requires it).
bool TakesDimensions(Opcode op);
bool RequiresDimensions(Opcode op);
bool TakesWindow(Opcode op);
bool TakesChannelId(Opcode op);
bool IsCollectivePermute(Opcode op);

// Whether the printer writes the attribute (shared with ModulesEqual so that "absent" and
// "present but default" compare the way they print).
bool PrintsDimensions(const Instruction& inst);
bool PrintsWindow(const Instruction& inst);
bool PrintsReplicaGroups(const Instruction& inst);

// Escapes a string for a double-quoted HLO string literal (without the quotes).
std::string EscapeString(std::string_view s);
// Reads the double-quoted string that starts at s[i] == '"' (escapes \n \t \r \xHH \ooo, any
// other \c as c), appending the unescaped text to *out when given. Returns the index just past
// the closing quote, or std::string_view::npos when the string is not terminated.
size_t ReadQuotedString(std::string_view s, size_t i, std::string* out);

// Text forms of typed attributes, used by the printer (and by tests).
std::string WindowToString(const Window& w);
std::string DimLabelsToString(const ConvolutionDimensionNumbers& d);
std::string PaddingToString(const std::vector<PaddingDim>& p);
std::string SliceToString(const SliceSpec& s);

}  // namespace shardscope::hlo_internal
