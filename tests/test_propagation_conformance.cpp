// Sharding propagation measured against XLA's own test expectations (../shared/conformance/xla/
// propagation, 205 cases from xla/service/sharding_propagation_test.cc): at least 90% of the
// checks must hold. Skips when ../shared is absent.
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/ir/hlo_text.h"
#include "app/conformance/conformance.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "tests/built_paths.h"

using namespace shardscope;

class TestPropagationConformance : public QObject {
  Q_OBJECT

 private:
  std::string Dir() const { return std::string(SHARDSCOPE_SHARED_DIR) + "/conformance/xla/propagation"; }

 private slots:
  void xlaPropagationExpectations() {
    if (!std::filesystem::is_directory(Dir())) QSKIP("../shared/conformance/xla/propagation not present");
    auto report = conformance::RunConformance("propagation", Dir());
    QVERIFY2(report.ok(), report.ok() ? "" : report.error().message.c_str());
    qInfo("%s", report->SummaryLine().c_str());
    QCOMPARE(report->cases_parsed, int64_t(report->cases.size()));
    QCOMPARE(int64_t(report->checks.size()), report->rate.total);
    QVERIFY(report->rate.total >= 350);  // 354 expectations + relations + output-propagation variants
    QVERIFY2(report->Rate() >= 90.0, qPrintable(QString::fromStdString(conformance::FormatReport(*report))));
    // The summary line is the runner's last line.
    const std::string text = conformance::FormatReport(*report);
    QVERIFY(text.size() > report->SummaryLine().size());
    QCOMPARE(QString::fromStdString(text.substr(text.size() - report->SummaryLine().size() - 1)),
             QString::fromStdString(report->SummaryLine() + "\n"));
  }

  // A failing expectation is reported as such (the runner is not vacuous).
  void runnerDetectsAMismatch() {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / "shardscope_conformance_selftest";
    fs::create_directories(dir);
    {
      std::ofstream(dir / "Case.hlo") << "HloModule m\nENTRY e {\n  p = f32[8] parameter(0), sharding={devices=[2]0,1}\n"
                                         "  a = f32[8] negate(p)\n  ROOT r = f32[8] copy(a)\n}\n";
      std::ofstream(dir / "Case.expect") << "a\t{devices=[2]0,1}\nr\tNONE\np\t{devices=[2]1,0}\n";
      std::ofstream(dir / "Case.settings.json") << "{\"is_spmd\": true}\n";
    }
    auto report = conformance::RunConformance("propagation", dir.string());
    QVERIFY(report.ok());
    QCOMPARE(report->rate.total, int64_t(3));
    QCOMPARE(report->rate.passed, int64_t(2));
    QCOMPARE(report->cases.size(), size_t{1});
    QCOMPARE(report->cases[0].checks, int64_t(3));
    QVERIFY(!report->cases[0].holds());
    QCOMPARE(report->by_op_kind["parameter"].total, int64_t(1));
    QCOMPARE(report->by_op_kind["parameter"].passed, int64_t(0));
    QCOMPARE(report->by_op_kind["negate"].passed, int64_t(1));
    QVERIFY(conformance::FormatReport(*report).find("FAIL Case  p") != std::string::npos);
    QCOMPARE(QString::fromStdString(report->SummaryLine()), QString("propagation: 2/3 checks hold (66.7%)"));
    auto bad_kind = conformance::RunConformance("nonsense", dir.string());
    QVERIFY(!bad_kind.ok());
    fs::remove_all(dir);
  }

  // The CLI prints the summary as its last line and exits 1 when a check fails.
  void cliLastLine() {
    if (!std::filesystem::is_directory(Dir())) QSKIP("../shared/conformance/xla/propagation not present");
    QProcess p;
    p.start(SHARDSCOPE_CLI_PATH, {"conformance", "propagation", QString::fromStdString(Dir())});
    QVERIFY(p.waitForFinished(120000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    const QString last = out.section('\n', -1);
    QVERIFY2(last.startsWith("propagation: ") && last.endsWith("%)"), qPrintable(last));
    QVERIFY(p.exitCode() == 0 || p.exitCode() == 1);
  }
};

QTEST_APPLESS_MAIN(TestPropagationConformance)
#include "test_propagation_conformance.moc"
