// Shared by the GUI tests that drive the main window: waiting until it is ready, and opening a zoo
// example in it at a given size.
#pragma once

#include <QSize>
#include <QString>
#include <QtTest>

#include "app/gui/main_window.h"

namespace shardscope::gui {

// Processes events until the window's document is ready (propagation and what follows it done);
// false when it failed or `timeout_ms` passed.
inline bool WaitReady(MainWindow& w, int timeout_ms = 300000) {
  bool done = false, ok = false;
  w.whenReady(timeout_ms, [&](bool r) {
    done = true;
    ok = r;
  });
  if (!QTest::qWaitFor([&] { return done; }, timeout_ms + 1000)) return false;
  return ok;
}

// Shows `w` at `size` (1600x1000 by default) in batch mode and opens the zoo example `name`,
// waiting until it is ready; the reason in *why when it fails.
inline bool OpenExample(MainWindow& w, const QString& name, QString* why, QSize size = QSize(1600, 1000)) {
  w.setBatchMode(true);
  w.resize(size);
  w.show();
  if (!w.openExample(name, why)) return false;
  if (!WaitReady(w)) {
    *why = name + ": not ready";
    return false;
  }
  return true;
}

}  // namespace shardscope::gui
