// Test helper shared by the tests that run the command-line tool: run shardscope-cli with
// arguments and collect its exit code and output.
#pragma once

#include <QtCore/QProcess>
#include <QtCore/QString>
#include <QtCore/QStringList>
#include "tests/built_paths.h"

namespace shardscope::testing {

struct CliResult {
  int code = -1;
  QString out, err;
};

inline CliResult RunCli(const QStringList& args) {
  QProcess p;
  p.start(QString::fromUtf8(SHARDSCOPE_CLI_PATH), args);
  if (!p.waitForFinished(300000)) qFatal("cli did not finish");
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

}  // namespace shardscope::testing
