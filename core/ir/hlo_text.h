// XLA HLO module text: parser and printer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"

namespace shardscope {

struct ParseOptions {
  // Run the verifier (shapes and attributes agree) after parsing. The parser itself checks syntax,
  // name resolution and operand counts; the verifier checks semantics.
  bool verify = true;
  // Read Shardy's round-trip attributes (xla.sdy.*) into shardings, meshes and GSPMD manual
  // regions (core/ir/shardy_import.h).
  bool import_shardy = true;
  // When set, receives warnings as "FILE:LINE:COLUMN: warning: ..." lines (e.g. a sharding= that
  // disagrees with xla.sdy.sharding). Warnings never fail the parse.
  std::vector<std::string>* warnings = nullptr;
};

// Parses a whole module. On error, Error::message is "FILE:LINE:COLUMN: error: expected X, found Y"
// (a single line) and Error::offset the byte offset. Never crashes or aborts, whatever the bytes.
Result<std::unique_ptr<Module>> ParseHloModule(std::string_view text, std::string_view filename = "<input>",
                                               const ParseOptions& options = {});

struct PrintOptions {
  bool print_layouts = true;
  bool print_metadata = true;
  bool print_backend_config = true;
};
// Canonical HLO text; ParseHloModule(PrintHloModule(m)) yields a module equal to m.
std::string PrintHloModule(const Module& module, const PrintOptions& options = {});
std::string PrintInstruction(const Instruction& inst, const PrintOptions& options = {});

// Structural equality used by round-trip tests: same computations, instruction names, opcodes,
// shapes, operands, attributes and (semantically) shardings. On inequality, `why` says where.
bool ModulesEqual(const Module& a, const Module& b, std::string* why = nullptr);

}  // namespace shardscope
