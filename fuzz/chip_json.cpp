// Target: chip-preset JSON (simulator/hardware.h) and the JSON reader under it (core/base/json.h).
// Any bytes are read or rejected with "LINE:COLUMN: ..." and an offset inside the text; a chip
// that reads is valid; a JSON value that reads serialises (compact and indented) to text that
// reads back as the same value, and serialising is a fixed point.
#include <string>
#include <string_view>

#include "core/base/json.h"
#include "fuzz/fuzz_target.h"
#include "simulator/hardware.h"

using namespace shardscope;
using namespace shardscope::sim;
using shardscope::fuzz::Finding;
using shardscope::fuzz::Reach;

namespace {

void CheckError(const Error& e, size_t size, const char* what) {
  fuzz::CheckErrorOffset(e, size, what);
  const size_t colon = e.message.find(':');
  if (colon == 0 || colon == std::string::npos || e.message.find_first_not_of("0123456789") != colon) {
    Finding(std::string(what) + " error without LINE:COLUMN", e.message);
  }
}

}  // namespace

void fuzz::TestOneInput(std::string_view text) {
  auto value = json::Parse(text);
  if (!value.ok()) {
    CheckError(value.error(), text.size(), "JSON");
    Reach("JSON rejected");
  } else {
    Reach("JSON read");
    for (int indent : {-1, 2}) {
      const std::string written = json::Serialize(*value, indent);
      auto again = json::Parse(written);
      if (!again.ok()) Finding("serialised JSON does not read: " + again.error().message, written);
      if (*again != *value) Finding("the JSON round trip differs", written);
      if (json::Serialize(*again, indent) != written) Finding("JSON serialising is not a fixed point", written);
    }
  }
  auto chip = ParseChipSpecJson(text);
  if (!chip.ok()) {
    CheckError(chip.error(), text.size(), "chip");
    return;
  }
  Reach("chip read");
  if (Status valid = ValidateChipSpec(*chip); !valid.ok()) Finding("a chip that reads is invalid: " + valid.error().message);
}
