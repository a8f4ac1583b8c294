// Shared by the GUI tests: waiting for a session's background jobs the way a test may (a nested
// event loop, which production code never runs).
#pragma once

#include <QtTest>

#include "app/gui/session.h"
#include "views/graph_view.h"

namespace shardscope::gui {

// Processes events until the session has no job queued or running (propagation, partitioning,
// simulation, run-store I/O, loading, layouts) or `timeout_ms` passes.
inline bool WaitUntilIdle(Session& session, int timeout_ms = 60000) {
  return QTest::qWaitFor([&session] { return session.idle(); }, timeout_ms);
}

// Processes events until `view` has shown its layout or `timeout_ms` passes.
inline bool WaitForLayout(views::GraphView& view, int timeout_ms = 60000) {
  return QTest::qWaitFor([&view] { return !view.isLayoutPending(); }, timeout_ms);
}

}  // namespace shardscope::gui
