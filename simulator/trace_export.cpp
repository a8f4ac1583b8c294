#include "simulator/trace_export.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <system_error>

#include "core/base/file_write.h"
#include "core/base/json.h"

namespace shardscope::sim {

// ---- Building blocks -----------------------------------------------------------------------------

namespace {

void AppendDouble(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Microseconds from seconds, fixed with nanosecond resolution ("12.345").
void AppendMicros(std::string& out, double seconds) {
  double us = seconds * 1e6;
  if (!std::isfinite(us)) us = 0;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, us, std::chars_format::fixed, 3);
  out.append(buf, r.ptr);
}

void AppendInt(std::string& out, int64_t v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

std::string CsvField(std::string_view text) {
  bool quote = text.find_first_of(",\"\r\n") != std::string_view::npos ||
               (!text.empty() && (text.front() == ' ' || text.back() == ' ' ||
                                  text.front() == '\t' || text.back() == '\t'));
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += "\"\"";
    else out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string FormatDouble(double v) {
  std::string out;
  AppendDouble(out, v);
  return out;
}

std::string FormatUtcTime(int64_t unix_ms) {
  int64_t secs = unix_ms >= 0 ? unix_ms / 1000 : -((-unix_ms + 999) / 1000);
  int64_t ms = unix_ms - secs * 1000;
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// ---- Selection -----------------------------------------------------------------------------------

namespace {

Result<std::vector<int64_t>> SelectDevices(const RunResult& run, const ExportSelection& sel) {
  if (!run.has_detail())
    return Error("run " + std::to_string(run.id) +
                 " has no per-device detail (it was loaded as a summary only)");
  std::vector<int64_t> devices;
  if (sel.devices.empty()) {
    devices.resize(static_cast<size_t>(run.num_devices()));
    for (size_t d = 0; d < devices.size(); ++d) devices[d] = static_cast<int64_t>(d);
  } else {
    for (int64_t d : sel.devices) {
      if (d < 0 || d >= run.num_devices())
        return Error("device " + std::to_string(d) + " is not in the run (it has devices 0.." +
                     std::to_string(run.num_devices() - 1) + ")");
      devices.push_back(d);
    }
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  }
  if (sel.one_device_per_class) {
    std::vector<bool> seen(run.classes.size(), false);
    std::vector<int64_t> reps;
    for (int64_t d : devices) {
      size_t c = static_cast<size_t>(run.device_class[static_cast<size_t>(d)]);
      if (!seen[c]) {
        seen[c] = true;
        reps.push_back(d);
      }
    }
    devices = std::move(reps);
  }
  return devices;
}

Status CheckRange(const ExportSelection& sel) {
  if ((sel.start_s && !std::isfinite(*sel.start_s)) || (sel.end_s && !std::isfinite(*sel.end_s)))
    return Error("export time range must be finite");
  if (sel.start_s && sel.end_s && *sel.end_s < *sel.start_s)
    return Error("export time range ends (" + FormatDouble(*sel.end_s) + " s) before it starts (" +
                 FormatDouble(*sel.start_s) + " s)");
  return Status::Ok();
}

// Same rule as RunStore::LoadDeviceTimeline: overlaps [start, end), or zero-length and inside.
bool EventInRange(const TimelineEvent& e, const ExportSelection& sel) {
  if (sel.start_s && sel.end_s && !(*sel.start_s < *sel.end_s)) return false;  // empty range
  if (sel.end_s && !(e.start_s < *sel.end_s)) return false;
  if (sel.start_s && !(e.end_s() > *sel.start_s || e.start_s >= *sel.start_s)) return false;
  return true;
}

bool TimeInRange(double t, const ExportSelection& sel) {
  if (sel.start_s && t < *sel.start_s) return false;
  if (sel.end_s && !(t < *sel.end_s)) return false;
  return true;
}

// Buffers output and flushes it to the stream in large chunks.
class ChunkedWriter {
 public:
  explicit ChunkedWriter(std::ostream& out) : out_(out) { buf_.reserve(kChunk + 4096); }
  std::string& buf() { return buf_; }
  void MaybeFlush() {
    if (buf_.size() >= kChunk) Flush();
  }
  void Flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }
  bool ok() const { return static_cast<bool>(out_); }

 private:
  static constexpr size_t kChunk = 1 << 20;
  std::ostream& out_;
  std::string buf_;
};

}  // namespace

// ---- Chrome trace ----------------------------------------------------------------------------------

Status WriteChromeTrace(const RunResult& run, std::ostream& out, const TraceExportOptions& options) {
  if (Status v = run.Validate(); !v.ok()) return Error("cannot export an invalid run: " + v.error().message);
  if (Status r = CheckRange(options.selection); !r.ok()) return r;
  Result<std::vector<int64_t>> devices = SelectDevices(run, options.selection);
  if (!devices.ok()) return devices.error();
  const ExportSelection& sel = options.selection;

  ChunkedWriter w(out);
  std::string& b = w.buf();
  b += "{\"displayTimeUnit\":\"ns\",\"otherData\":{";
  b += "\"run_id\":";
  AppendInt(b, run.id);
  b += ",\"label\":";
  json::AppendQuoted(b, run.label);
  b += ",\"created\":";
  json::AppendQuoted(b, run.created_unix_ms ? FormatUtcTime(run.created_unix_ms) : std::string());
  b += ",\"module\":";
  json::AppendQuoted(b, run.inputs.module_name);
  b += ",\"module_hash\":";
  json::AppendQuoted(b, run.inputs.module_hash);
  b += ",\"chip\":";
  json::AppendQuoted(b, run.inputs.chip_preset);
  b += ",\"mesh\":";
  json::AppendQuoted(b, run.inputs.mesh_text);
  b += ",\"topology\":";
  json::AppendQuoted(b, run.inputs.topology_options);
  b += ",\"placement\":";
  json::AppendQuoted(b, run.inputs.placement);
  for (const auto& [k, v] : run.inputs.settings) {
    b += ',';
    json::AppendQuoted(b, "setting." + k);
    b += ':';
    json::AppendQuoted(b, v);
  }
  b += ",\"devices\":";
  AppendInt(b, run.num_devices());
  b += ",\"step_time_us\":";
  AppendMicros(b, run.summary.step_time_s);
  b += ",\"mfu\":";
  AppendDouble(b, run.summary.mfu);
  b += ",\"peak_memory_bytes\":";
  AppendInt(b, run.summary.peak_memory_bytes);
  b += ",\"bytes_communicated\":";
  AppendInt(b, run.summary.bytes_communicated);
  b += "},\"traceEvents\":[";

  bool first = true;
  auto begin_event = [&]() {
    if (!first) b += ",\n";
    else b += '\n';
    first = false;
  };

  for (int64_t d : *devices) {
    const int32_t ci = run.device_class[static_cast<size_t>(d)];
    const DeviceClass& cls = run.classes[static_cast<size_t>(ci)];
    std::string pname = "Device " + std::to_string(d);
    if (run.classes.size() > 1 || !cls.label.empty()) {
      pname += " (class " + std::to_string(ci);
      if (!cls.label.empty()) pname += ": " + cls.label;
      pname += ")";
    }
    begin_event();
    b += "{\"ph\":\"M\",\"pid\":";
    AppendInt(b, d);
    b += ",\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":";
    json::AppendQuoted(b, pname);
    b += "}}";
    begin_event();
    b += "{\"ph\":\"M\",\"pid\":";
    AppendInt(b, d);
    b += ",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":";
    AppendInt(b, d);
    b += "}}";
    for (int t = 0; t < kNumStreams; ++t) {
      begin_event();
      b += "{\"ph\":\"M\",\"pid\":";
      AppendInt(b, d);
      b += ",\"tid\":";
      AppendInt(b, t);
      b += ",\"name\":\"thread_name\",\"args\":{\"name\":";
      json::AppendQuoted(b, StreamName(static_cast<Stream>(t)));
      b += "}}";
      begin_event();
      b += "{\"ph\":\"M\",\"pid\":";
      AppendInt(b, d);
      b += ",\"tid\":";
      AppendInt(b, t);
      b += ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":";
      AppendInt(b, t);
      b += "}}";
    }

    for (const TimelineEvent& e : cls.events) {
      if (!EventInRange(e, sel)) continue;
      begin_event();
      b += "{\"ph\":\"X\",\"pid\":";
      AppendInt(b, d);
      b += ",\"tid\":";
      AppendInt(b, static_cast<int64_t>(e.stream));
      b += ",\"ts\":";
      AppendMicros(b, e.start_s);
      b += ",\"dur\":";
      AppendMicros(b, e.duration_s);
      b += ",\"name\":";
      json::AppendQuoted(b, e.instruction);
      b += ",\"cat\":";
      json::AppendQuoted(b, StreamName(e.stream));
      b += ",\"args\":{\"kind\":";
      json::AppendQuoted(b, e.kind);
      b += ",\"bytes\":";
      AppendInt(b, e.bytes);
      b += ",\"flops\":";
      AppendDouble(b, e.flops);
      b += "}}";
      w.MaybeFlush();
    }

    if (options.include_memory) {
      for (const MemorySample& m : cls.memory) {
        if (!TimeInRange(m.time_s, sel)) continue;
        begin_event();
        b += "{\"ph\":\"C\",\"pid\":";
        AppendInt(b, d);
        b += ",\"tid\":0,\"name\":\"memory\",\"ts\":";
        AppendMicros(b, m.time_s);
        b += ",\"args\":{";
        for (int c = 0; c < kNumMemoryCategories; ++c) {
          if (c) b += ',';
          b += '"';
          b += MemoryCategoryName(static_cast<MemoryCategory>(c));
          b += "\":";
          AppendInt(b, m.bytes[static_cast<size_t>(c)]);
        }
        b += "}}";
        w.MaybeFlush();
      }
    }
    w.MaybeFlush();
    if (!w.ok()) return Error("cannot write the trace: output stream failed");
  }
  b += "\n]}\n";
  w.Flush();
  if (!w.ok()) return Error("cannot write the trace: output stream failed");
  return Status::Ok();
}

Result<std::string> ChromeTraceJson(const RunResult& run, const TraceExportOptions& options) {
  std::ostringstream os;
  if (Status s = WriteChromeTrace(run, os, options); !s.ok()) return s.error();
  return std::move(os).str();
}

Status ExportChromeTrace(const RunResult& run, const std::string& path, const TraceExportOptions& options) {
  return WriteFileAtomically(path, [&](std::ostream& os) { return WriteChromeTrace(run, os, options); });
}

// ---- CSV -------------------------------------------------------------------------------------------

namespace {

void AppendRow(std::string& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    out += CsvField(fields[i]);
  }
  out += "\r\n";
}

std::string I(int64_t v) { return std::to_string(v); }

}  // namespace

Status WriteSummaryCsv(const std::vector<RunOverview>& runs, std::ostream& out) {
  std::string b;
  AppendRow(b, {"id", "created_utc", "label", "module", "module_hash", "chip", "mesh", "topology",
                "settings", "devices", "device_classes", "step_time_s", "compute_time_s",
                "communication_time_s", "idle_time_s", "exposed_communication_s", "mfu",
                "peak_memory_bytes", "bytes_communicated", "total_flops"});
  for (const RunOverview& r : runs) {
    std::string settings;
    for (const auto& [k, v] : r.inputs.settings) {
      if (!settings.empty()) settings += "; ";
      settings += k + "=" + v;
    }
    const RunSummary& s = r.summary;
    AppendRow(b, {I(r.id), r.created_unix_ms ? FormatUtcTime(r.created_unix_ms) : std::string(),
                  r.label, r.inputs.module_name, r.inputs.module_hash, r.inputs.chip_preset,
                  r.inputs.mesh_text, r.inputs.topology_options, settings, I(s.num_devices),
                  I(r.num_classes), FormatDouble(s.step_time_s), FormatDouble(s.compute_time_s),
                  FormatDouble(s.communication_time_s), FormatDouble(s.idle_time_s),
                  FormatDouble(s.exposed_communication_s), FormatDouble(s.mfu),
                  I(s.peak_memory_bytes), I(s.bytes_communicated), FormatDouble(s.total_flops)});
  }
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
  if (!out) return Error("cannot write the summary CSV: output stream failed");
  return Status::Ok();
}

Status WriteTimelineCsv(const RunResult& run, std::ostream& out, const ExportSelection& selection) {
  if (Status v = run.Validate(); !v.ok()) return Error("cannot export an invalid run: " + v.error().message);
  if (Status r = CheckRange(selection); !r.ok()) return r;
  Result<std::vector<int64_t>> devices = SelectDevices(run, selection);
  if (!devices.ok()) return devices.error();
  ChunkedWriter w(out);
  AppendRow(w.buf(), {"device", "stream", "start_s", "duration_s", "end_s", "instruction", "kind",
                      "bytes", "flops"});
  for (int64_t d : *devices) {
    const DeviceClass& cls = *run.ClassOf(d);
    for (const TimelineEvent& e : cls.events) {
      if (!EventInRange(e, selection)) continue;
      AppendRow(w.buf(), {I(d), std::string(StreamName(e.stream)), FormatDouble(e.start_s),
                          FormatDouble(e.duration_s), FormatDouble(e.end_s()), e.instruction, e.kind,
                          I(e.bytes), FormatDouble(e.flops)});
      w.MaybeFlush();
    }
    if (!w.ok()) return Error("cannot write the timeline CSV: output stream failed");
  }
  w.Flush();
  if (!w.ok()) return Error("cannot write the timeline CSV: output stream failed");
  return Status::Ok();
}

Status WriteMemoryCsv(const RunResult& run, std::ostream& out, const ExportSelection& selection) {
  if (Status v = run.Validate(); !v.ok()) return Error("cannot export an invalid run: " + v.error().message);
  if (Status r = CheckRange(selection); !r.ok()) return r;
  Result<std::vector<int64_t>> devices = SelectDevices(run, selection);
  if (!devices.ok()) return devices.error();
  ChunkedWriter w(out);
  std::vector<std::string> header = {"device", "time_s"};
  for (int c = 0; c < kNumMemoryCategories; ++c)
    header.emplace_back(std::string(MemoryCategoryName(static_cast<MemoryCategory>(c))) + "_bytes");
  header.emplace_back("total_bytes");
  AppendRow(w.buf(), header);
  for (int64_t d : *devices) {
    for (const MemorySample& m : run.ClassOf(d)->memory) {
      if (!TimeInRange(m.time_s, selection)) continue;
      std::vector<std::string> row = {I(d), FormatDouble(m.time_s)};
      for (int64_t v : m.bytes) row.push_back(I(v));
      row.push_back(I(m.total()));
      AppendRow(w.buf(), row);
      w.MaybeFlush();
    }
    if (!w.ok()) return Error("cannot write the memory CSV: output stream failed");
  }
  w.Flush();
  if (!w.ok()) return Error("cannot write the memory CSV: output stream failed");
  return Status::Ok();
}

Status ExportCsv(const RunResult& run, std::string_view kind, const std::string& path,
                 const ExportSelection& selection) {
  if (kind == "summary")
    return WriteFileAtomically(path, [&](std::ostream& os) { return WriteSummaryCsv({OverviewOf(run)}, os); });
  if (kind == "timeline")
    return WriteFileAtomically(path, [&](std::ostream& os) { return WriteTimelineCsv(run, os, selection); });
  if (kind == "memory")
    return WriteFileAtomically(path, [&](std::ostream& os) { return WriteMemoryCsv(run, os, selection); });
  return Error("unknown CSV export '" + std::string(kind) + "' (expected summary, timeline or memory)");
}

}  // namespace shardscope::sim
