// Target: HLO text. Any bytes either parse or give an error "FILE:LINE:COLUMN: ..." with a byte
// offset inside the text; a module that parses prints to text that parses back into an equal
// module (ModulesEqual), printing is a fixed point, and the verifier judges both alike.
#include <string>
#include <string_view>

#include "core/ir/hlo_text.h"
#include "core/ir/verifier.h"
#include "fuzz/fuzz_target.h"

using namespace shardscope;
using shardscope::fuzz::Finding;
using shardscope::fuzz::Reach;

void fuzz::TestOneInput(std::string_view text) {
  ParseOptions no_verify;
  no_verify.verify = false;
  auto parsed = ParseHloModule(text, "in.hlo", no_verify);
  if (!parsed.ok()) {
    const Error& e = parsed.error();
    if (e.message.rfind("in.hlo:", 0) != 0) Finding("a parse error without FILE:LINE:COLUMN", e.message);
    fuzz::CheckErrorOffset(e, text.size(), "parse");
    Reach("rejected by the parser");
    return;
  }
  Reach("parsed");
  const std::string printed = PrintHloModule(**parsed);
  auto again = ParseHloModule(printed, "printed.hlo", no_verify);
  if (!again.ok()) Finding("the printed module does not parse: " + again.error().message, printed);
  std::string why;
  if (!ModulesEqual(**parsed, **again, &why)) Finding("the round trip changes the module: " + why, printed);
  if (PrintHloModule(**again) != printed) Finding("printing is not a fixed point", printed);
  Reach("round trip equal");
  const Status first = VerifyModule(**parsed);
  const Status second = VerifyModule(**again);
  if (first.ok() != second.ok()) {
    Finding("the verifier judges the printed module differently",
            (first.ok() ? std::string("original ok") : first.error().message) + "\n" +
                (second.ok() ? std::string("printed ok") : second.error().message) + "\n" + printed);
  }
  if (first.ok()) Reach("verified");
}
