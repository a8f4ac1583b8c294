#include "views/run_display.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/base/units.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/memory_chart.h"
#include "views/run_history.h"
#include "views/sharding_style.h"

namespace shardscope::views {

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

QString RunName(int64_t id) { return id < 0 ? QString("unsaved run %1").arg(-id) : QString("run %1").arg(id); }

const DeviceClass* PeakClass(const RunResult& run) {
  const DeviceClass* peak = nullptr;
  for (const auto& c : run.classes) {
    if (!peak || c.peak_memory_bytes > peak->peak_memory_bytes) peak = &c;
  }
  return peak;
}

QString FormatFigure(const ComparedFigure& f, double v) {
  if (f.unit == "s") return Q(FormatSeconds(v));
  if (f.unit == "bytes") return Q(FormatBytes(v));
  if (f.unit.find("fraction") != std::string::npos) return Q(FormatPercent(v));
  return QString::number(v, 'g', 4);
}

QString FormatDifference(const ComparedFigure& f) {
  if (BetterRun(f) == 0) return "0";
  const double d = f.difference();
  const QString sign = d > 0 ? "+" : QString::fromUtf8("\u2212");
  if (f.unit.find("fraction") != std::string::npos) return sign + QString("%1 pt").arg(std::fabs(d) * 100, 0, 'f', 1);
  return sign + FormatFigure(f, std::fabs(d));
}

QString PeakMemoryText(const RunSummary& s) {
  if (s.device_hbm_bytes <= 0) return Q(FormatBytes(s.peak_memory_bytes));
  return QString("%1 of %2 HBM").arg(Q(FormatBytes(s.peak_memory_bytes)), Q(FormatBytes(s.device_hbm_bytes)));
}

QString MemoryFitWarningHtml(const RunSummary& s) {
  if (s.fits()) return QString();
  return QString("<p style=\"color:#c62828\"><b>Does not fit:</b> the peak of %1 per device exceeds the chip's %2 HBM "
                 "by %3 — this strategy cannot run on this slice as simulated.</p>")
      .arg(Q(FormatBytes(s.peak_memory_bytes)), Q(FormatBytes(s.device_hbm_bytes)), Q(FormatBytes(s.missing_bytes())));
}

void ShowRunMemory(MemoryChart* chart, const RunResult& run, const QPalette& palette) {
  const DeviceClass* peak = PeakClass(run);
  if (!peak) {
    chart->clear();
    return;
  }
  std::vector<MemoryChart::Series> series;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    MemoryChart::Series s;
    s.name = Q(std::string(MemoryCategoryName(static_cast<MemoryCategory>(c))));
    s.color = QColor::fromHsl((c * 67 + 200) % 360, 160, IsDarkPalette(palette) ? 120 : 110);
    bool any = false;
    for (const auto& m : peak->memory) {
      s.points.push_back({m.time_s, static_cast<double>(m.bytes[static_cast<size_t>(c)])});
      any |= m.bytes[static_cast<size_t>(c)] > 0;
    }
    if (any) series.push_back(std::move(s));
  }
  MemoryChart::Series total;
  total.name = "total";
  total.color = palette.color(QPalette::Text);
  total.emphasise = true;
  for (const auto& m : peak->memory) total.points.push_back({m.time_s, static_cast<double>(m.total())});
  series.push_back(std::move(total));
  chart->setSeries(QString("Memory per device (peak %1)").arg(Q(FormatBytes(peak->peak_memory_bytes))), std::move(series),
                   peak->peak_memory_time_s);
}

void ShowComparedMemory(MemoryChart* chart, const RunResult& a, const RunResult& b, const QPalette& palette) {
  std::vector<MemoryChart::Series> series;
  std::vector<MemoryChart::Marker> markers;
  const bool dark = IsDarkPalette(palette);
  const QColor colors[2] = {dark ? QColor(110, 170, 255) : QColor(30, 90, 200), dark ? QColor(255, 150, 90) : QColor(210, 90, 20)};
  const char* names[2] = {"A", "B"};
  int i = 0;
  for (const RunResult* run : {&a, &b}) {
    if (const DeviceClass* peak = PeakClass(*run)) {
      MemoryChart::Series s;
      s.name = QString("%1: %2").arg(names[i], RunName(run->id));
      s.color = colors[i];
      s.emphasise = true;
      for (const auto& m : peak->memory) s.points.push_back({m.time_s, static_cast<double>(m.total())});
      series.push_back(std::move(s));
      markers.push_back({peak->peak_memory_time_s, QString("%1 peak").arg(names[i]), colors[i]});
    }
    ++i;
  }
  chart->setSeries(QString("Memory per device: A peak %1, B peak %2")
                       .arg(Q(FormatBytes(static_cast<double>(a.summary.peak_memory_bytes))),
                            Q(FormatBytes(static_cast<double>(b.summary.peak_memory_bytes)))),
                   std::move(series), std::move(markers));
}

int64_t InstructionForRunEvent(const DocumentModel* doc, const RunHistory* runs, const AnalysisModel* analysis,
                               int64_t run_id, const QString& spmd_instruction) {
  if (!doc || !runs || !doc->module()) return -1;
  const Module* module = doc->module();
  if (const RunOverview* o = runs->overview(run_id); o && !o->inputs.module_name.empty() && RunModuleName(o->inputs) != module->name()) {
    return -1;  // another module's run: its names mean nothing here
  }
  std::string name = spmd_instruction.toStdString();
  while (!name.empty() && name.back() == ']') {  // "[i]" per enclosing loop
    const auto open = name.rfind('[');
    if (open == std::string::npos) break;
    name.erase(open);
  }
  if (name.empty()) return -1;
  // The name as the event gives it, with the partitioner's ".spmd" computation suffix dropped, and
  // without its computation.
  std::vector<std::string> candidates{name};
  for (auto pos = name.find(".spmd/"); pos != std::string::npos; pos = std::string::npos) {
    candidates.push_back(name.substr(0, pos) + name.substr(pos + 5));
  }
  if (const auto slash = name.rfind('/'); slash != std::string::npos) candidates.push_back(name.substr(slash + 1));
  auto find = [module](const std::string& n) -> int64_t {
    const Instruction* inst = module->FindInstruction(n);
    return inst ? inst->id() : -1;
  };
  // 1. The partitioner's own map, kept with the run (in the store too).
  if (auto run = runs->loadedRun(run_id)) {
    for (const auto& c : candidates) {
      auto it = run->origins.find(c);
      if (it == run->origins.end()) continue;
      if (int64_t id = find(it->second); id >= 0) return id;
    }
  }
  // 2. The last partitioned program of this document.
  if (analysis && analysis->partition().ok()) {
    const PartitionResult& p = *analysis->partition().result;
    for (const auto& c : candidates) {
      for (const auto& [original, spmd_names] : p.origin_map) {
        if (std::find(spmd_names.begin(), spmd_names.end(), c) == spmd_names.end()) continue;
        if (int64_t id = find(original); id >= 0) return id;
      }
      for (const auto& col : p.collectives) {
        if (col.instruction != c) continue;
        if (int64_t id = find(col.origin); id >= 0) return id;
      }
    }
  }
  // 3. The same name (the partitioner keeps the names of the instructions it partitions).
  for (const auto& c : candidates) {
    if (int64_t id = find(c); id >= 0) return id;
  }
  return -1;
}

}  // namespace shardscope::views
