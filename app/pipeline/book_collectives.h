// The collective cases of "How To Scale Your Model", part 3 (../shared/papers/004_*.txt; validation.md
// C1-C8) as the reproduce registry's `book-collectives` case: each is one collective on a chip
// preset's slice, costed by the simulator's collective model (EstimateCollective) exactly as a
// simulated program's collectives are, beside the book's figure.
//
// The book gives some figures as V / W, the large-N limit of a ring; an exact bidirectional ring over
// N devices moves (N - 1) / N of V. validation.md asks to model the exact algorithm and to say which
// figure a result is compared with: such a case compares with the book's figure times (N - 1) / N
// and says so in its metric's name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "simulator/collectives/collective.h"

namespace shardscope::pipeline {

struct BookCollectiveCase {
  std::string id;           // "C1"
  std::string label;        // what it is, one line
  std::string chip;         // chip preset
  std::string mesh;         // the logical mesh, "X=8,Y=4"
  bool wraparound_all = false;            // every axis wraps (else the generation's rule)
  sim::CollectiveKind kind = sim::CollectiveKind::kAllGather;
  std::vector<std::string> axes;          // the mesh axes the collective runs over
  double bytes_per_device = 0;            // each device's operand (EstimateCollective's convention)
  // C8: the figure is the ratio of an all-to-all's time to `kind`'s, same operand and groups.
  bool all_to_all_ratio = false;
  double published = 0;     // seconds, or the ratio
  double exact_factor = 1;  // (N - 1) / N when the book's figure is the large-N V / W
  double tolerance = 0.10;  // relative
  std::string source;       // the book's words, where the figure is
};

// C1 (both wraparound cases), C2, C3, C4, C5, C6, C7 and C8.
std::vector<BookCollectiveCase> BookCollectiveCases();

// The simulated figure: the collective's time in seconds, or C8's ratio.
Result<double> SimulateBookCollective(const BookCollectiveCase& c);

}  // namespace shardscope::pipeline
