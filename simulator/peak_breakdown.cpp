#include "simulator/peak_breakdown.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <utility>

#include "core/base/units.h"

namespace shardscope::sim {

std::string PeakBufferPattern(std::string_view name) {
  // A rematerialised copy ("x.remat", "x.remat2") is the value it recomputes.
  if (const size_t r = name.rfind(".remat"); r != std::string_view::npos) {
    bool digits_only = true;
    for (size_t k = r + 6; k < name.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(name[k]))) digits_only = false;
    if (digits_only) name = name.substr(0, r);
  }
  std::string out;
  out.reserve(name.size());
  for (size_t k = 0; k < name.size(); ++k) {
    if (std::isdigit(static_cast<unsigned char>(name[k]))) {
      out += '#';
      while (k + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[k + 1]))) ++k;
    } else {
      out += name[k];
    }
  }
  return out;
}

std::vector<PeakBufferGroup> GroupPeakBuffers(const std::vector<PeakBuffer>& buffers) {
  std::map<std::pair<std::string, MemoryCategory>, PeakBufferGroup> by;
  for (const PeakBuffer& b : buffers) {
    std::string pattern = PeakBufferPattern(b.name);
    PeakBufferGroup& g = by[{pattern, b.category}];
    if (g.count == 0) {
      g.pattern = std::move(pattern);
      g.category = b.category;
    }
    ++g.count;
    g.bytes += b.bytes;
    g.largest = std::max(g.largest, b.bytes);
  }
  std::vector<PeakBufferGroup> out;
  out.reserve(by.size());
  for (auto& [key, g] : by) out.push_back(std::move(g));
  std::stable_sort(out.begin(), out.end(), [](const PeakBufferGroup& a, const PeakBufferGroup& b) { return a.bytes > b.bytes; });
  return out;
}

std::string DescribePeakBufferGroups(const std::vector<PeakBufferGroup>& groups, size_t limit) {
  std::ostringstream os;
  const size_t shown = limit == 0 ? groups.size() : std::min(limit, groups.size());
  for (size_t k = 0; k < shown; ++k) {
    const PeakBufferGroup& g = groups[k];
    os << "  " << g.count << " x " << g.pattern << " (" << MemoryCategoryName(g.category)
       << "): " << FormatBytes(static_cast<double>(g.bytes));
    if (g.count > 1) os << ", largest " << FormatBytes(static_cast<double>(g.largest));
    os << "\n";
  }
  if (shown < groups.size()) {
    int64_t rest = 0, count = 0;
    for (size_t k = shown; k < groups.size(); ++k) {
      rest += groups[k].bytes;
      count += groups[k].count;
    }
    os << "  " << count << " other buffers in " << groups.size() - shown << " groups: " << FormatBytes(static_cast<double>(rest))
       << "\n";
  }
  return os.str();
}

}  // namespace shardscope::sim
