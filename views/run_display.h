// How the views show simulation runs, shared by the simulation view (one run) and the comparison
// view (two runs): run names, the figures of a comparison as text, the memory curve of the device
// class that reaches the peak, and the instruction of the document a timeline event came from.
#pragma once

#include <cstdint>
#include <memory>

#include <QPalette>
#include <QString>

#include "views/run_history.h"  // the simulator's value types

namespace shardscope::views {

class AnalysisModel;
class DocumentModel;
class MemoryChart;
class RunHistory;

// "run 3", or "unsaved run 2" for a run kept in memory only (negative id).
QString RunName(int64_t id);
// The device class whose memory reaches the run's peak (nullptr when the run has none).
const DeviceClass* PeakClass(const RunResult& run);

// A figure's value in its unit ("1.20 ms", "8.39 MB", "41.2 %").
QString FormatFigure(const ComparedFigure& figure, double value);
// B − A with its sign ("+1.20 ms", "−3.0 pt").
QString FormatDifference(const ComparedFigure& figure);

// The peak memory per device beside the chip's HBM ("14.8 GB of 16.0 GB HBM"; the peak alone when
// the HBM is unknown, as for runs stored before it was recorded).
QString PeakMemoryText(const RunSummary& summary);
// A warning paragraph when the peak does not fit the chip's HBM ("" when it fits or is unknown):
// the strategy cannot run on this slice as simulated.
QString MemoryFitWarningHtml(const RunSummary& summary);

// The memory of the device class holding the peak, per category and in total, with the peak marked.
void ShowRunMemory(MemoryChart* chart, const RunResult& run, const QPalette& palette);
// The total memory of both runs overlaid ("A: run 1", "B: run 2"), each with its peak marked.
void ShowComparedMemory(MemoryChart* chart, const RunResult& a, const RunResult& b, const QPalette& palette);

// The instruction of `doc` a timeline event of run `run_id` came from, by the SPMD instruction name
// the event carries (loop suffixes "[i]" ignored): through the partitioner's map kept with the run,
// else the last partitioned program of `analysis`, else the same name. -1 when none (another
// module's run, or an instruction the partitioner inserted).
int64_t InstructionForRunEvent(const DocumentModel* doc, const RunHistory* runs, const AnalysisModel* analysis,
                               int64_t run_id, const QString& spmd_instruction);

}  // namespace shardscope::views
