// Exports of a run: Chrome trace event JSON (opens in Perfetto and chrome://tracing) and CSV
// (RFC 4180: comma separated, CRLF line ends, fields with a comma, quote, CR or LF quoted, quotes
// doubled).
//
// Chrome trace layout: one process per device (pid = device id, named "Device N"), two threads per
// process: tid 0 = compute, tid 1 = communication. Timeline events are "X" (complete) events with
// ts/dur in microseconds; memory samples are "C" (counter) events named "memory" with one series
// per category (bytes); "M" metadata events name processes and threads and fix their order.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "simulator/run_result.h"

namespace shardscope::sim {

// Which devices and which part of the step to export.
struct ExportSelection {
  std::vector<int64_t> devices;       // empty = every device of the run
  bool one_device_per_class = false;  // only the lowest-numbered device of each class
  // Only events overlapping [start_s, end_s) and memory samples inside it; empty = whole step.
  std::optional<double> start_s;
  std::optional<double> end_s;
};

struct TraceExportOptions {
  ExportSelection selection;
  bool include_memory = true;  // memory counter tracks
};

// Writes the trace to `out`. Errors: invalid run (see RunResult::Validate), a selected device that
// the run does not have, a run without per-device detail, or a stream failure.
Status WriteChromeTrace(const RunResult& run, std::ostream& out, const TraceExportOptions& options = {});
Result<std::string> ChromeTraceJson(const RunResult& run, const TraceExportOptions& options = {});
Status ExportChromeTrace(const RunResult& run, const std::string& path,
                         const TraceExportOptions& options = {});

// Summary CSV: a header row and one row per run (id, created time, label, inputs, figures).
Status WriteSummaryCsv(const std::vector<RunOverview>& runs, std::ostream& out);
// Timeline CSV: device, stream, start_s, duration_s, end_s, instruction, kind, bytes, flops.
Status WriteTimelineCsv(const RunResult& run, std::ostream& out, const ExportSelection& selection = {});
// Memory CSV: device, time_s, one column per category, total.
Status WriteMemoryCsv(const RunResult& run, std::ostream& out, const ExportSelection& selection = {});
// Writes one of the above to a file (kind = "summary" | "timeline" | "memory").
Status ExportCsv(const RunResult& run, std::string_view kind, const std::string& path,
                 const ExportSelection& selection = {});

// Building blocks, exposed for tests and other writers.
// One RFC 4180 field: quoted only when it contains ',', '"', CR or LF (or leading/trailing space).
std::string CsvField(std::string_view text);
// Shortest text that reads back as the same double ("0.1", "1e+20"); non-finite values give "0".
std::string FormatDouble(double v);
// "2024-05-01T12:00:00.123Z".
std::string FormatUtcTime(int64_t unix_ms);

}  // namespace shardscope::sim
