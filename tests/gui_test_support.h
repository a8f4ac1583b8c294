// Shared by the GUI tests: waiting for a session's background jobs the way a test may (a nested
// event loop, which production code never runs).
#pragma once

#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/session.h"
#include "views/document_model.h"
#include "views/graph_view.h"

namespace shardscope::gui {

// GUI tests run offscreen unless QT_QPA_PLATFORM says otherwise (set before QTest's main makes the
// application).
inline const bool kOffscreenByDefault = [] {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  return true;
}();

// Simulated runs of this test go to a store in `dir`, never the user's (and QStandardPaths to the
// test locations). False when the folder could not be made.
inline bool UseTestRunStore(const QTemporaryDir& dir) {
  QStandardPaths::setTestModeEnabled(true);
  if (!dir.isValid()) return false;
  qputenv("SHARDSCOPE_RUN_DB", dir.filePath("runs.sqlite").toLocal8Bit());
  return true;
}

// Processes events until the session has no job queued or running (propagation, partitioning,
// simulation, run-store I/O, loading, layouts) or `timeout_ms` passes.
inline bool WaitUntilIdle(Session& session, int timeout_ms = 60000) {
  return QTest::qWaitFor([&session] { return session.idle(); }, timeout_ms);
}

// Processes events until `view` has shown its layout or `timeout_ms` passes.
// A 900x700 graph view of the session's document, laid out on the session's job tracker.
inline void ShowDocument(views::GraphView& view, Session& session) {
  view.resize(900, 700);
  view.setJobTracker(session.jobs());
  view.setDocument(session.document());
}

inline bool WaitForLayout(views::GraphView& view, int timeout_ms = 60000) {
  return QTest::qWaitFor([&view] { return !view.isLayoutPending(); }, timeout_ms);
}

// A hand-written convolution module on 2 devices (the second module the window tests open).
inline constexpr const char* kHandConvModule = R"(HloModule handconv, num_partitions=2

ENTRY main {
  img = f32[8,32,32,16] parameter(0), sharding={devices=[2,1,1,1]<=[2]}
  k = f32[3,3,16,32] parameter(1), sharding={replicated}
  ROOT conv = f32[8,32,32,32] convolution(img, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
)";

}  // namespace shardscope::gui
