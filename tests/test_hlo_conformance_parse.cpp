// Conformance: every HLO module of XLA's own sharding tests (../shared/conformance/xla, propagation
// and spmd) must load. Counts are asserted; docs/conformance-parse.md reports them and lists the
// modules that do not parse, with the reason. Skips cleanly when the corpus is absent.
#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ir/hlo_text.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Modules that cannot load, and why (see docs/conformance-parse.md): none today.
bool KnownUnsupported(const std::string& file, const std::string& message) {
  (void)file;
  (void)message;
  return false;
}

}  // namespace

class TestHloConformanceParse : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void everyModuleParses();
  void modulesVerify();
  void modulesRoundTrip();
  void expectationNamesResolve();

 private:
  std::string dir_;
  std::vector<std::string> files_;  // sorted, *.hlo under propagation/ and spmd/
};

void TestHloConformanceParse::initTestCase() {
  dir_ = std::string(SHARDSCOPE_SHARED_DIR) + "/conformance/xla";
  if (!std::filesystem::exists(dir_)) QSKIP("conformance corpus not present");
  for (const char* sub : {"propagation", "spmd"})
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/" + sub))
      if (e.path().extension() == ".hlo") files_.push_back(e.path().string());
  std::sort(files_.begin(), files_.end());
}

void TestHloConformanceParse::everyModuleParses() {
  // The corpus README: 205 propagation cases and 413 SPMD cases.
  QCOMPARE(files_.size(), size_t{618});
  int parsed = 0, unsupported = 0;
  for (const auto& f : files_) {
    auto r = ParseHloModule(ReadText(f), f, ParseOptions{false});
    if (r.ok()) {
      ++parsed;
      QVERIFY2((*r)->entry() != nullptr, f.c_str());
      continue;
    }
    QVERIFY2(KnownUnsupported(f, r.error().message), r.error().message.c_str());
    ++unsupported;
  }
  qInfo("parsed %d of %zu corpus modules (verifier off); %d use an unsupported element type", parsed, files_.size(),
        unsupported);
  QCOMPARE(parsed, 618);
  QCOMPARE(unsupported, 0);
}

void TestHloConformanceParse::modulesVerify() {
  int verified = 0;
  for (const auto& f : files_) {
    auto r = ParseHloModule(ReadText(f), f);
    if (r.ok()) {
      ++verified;
      continue;
    }
    if (KnownUnsupported(f, r.error().message)) continue;
    // What remains are verifier findings: positioned at the instruction, naming computation/instruction.
    const std::string& m = r.error().message;
    QVERIFY2(m.rfind(f + ":", 0) == 0 && m.find(": error: ") != std::string::npos && m.find('/') != std::string::npos,
             m.c_str());
    qInfo("verifier: %s", m.c_str());
  }
  qInfo("parsed and verified %d of %zu corpus modules", verified, files_.size());
  // Every module that parses also verifies (docs/conformance-parse.md).
  QCOMPARE(verified, 618);
}

void TestHloConformanceParse::modulesRoundTrip() {
  int round_tripped = 0;
  for (const auto& f : files_) {
    auto a = ParseHloModule(ReadText(f), f, ParseOptions{false});
    if (!a.ok()) continue;
    const std::string printed = PrintHloModule(**a);
    auto b = ParseHloModule(printed, f + " (printed)", ParseOptions{false});
    QVERIFY2(b.ok(), b.ok() ? "" : b.error().message.c_str());
    std::string why;
    QVERIFY2(ModulesEqual(**a, **b, &why), (f + ": " + why).c_str());
    QVERIFY2(PrintHloModule(**b) == printed, f.c_str());
    ++round_tripped;
  }
  QCOMPARE(round_tripped, 618);
}

// Every instruction the propagation expectations name (instruction or computation/instruction)
// exists in the parsed module under that name.
void TestHloConformanceParse::expectationNamesResolve() {
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/propagation")) {
    const std::string path = e.path().string();
    const auto dot = path.find(".expect");
    if (dot == std::string::npos) continue;
    const bool relation = path.size() >= 11 && path.compare(path.size() - 11, 11, ".expect_rel") == 0;
    auto m = ParseHloModule(ReadText(path.substr(0, dot) + ".hlo"), path, ParseOptions{false});
    if (!m.ok()) continue;
    std::istringstream lines(ReadText(path));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      std::vector<std::string> cols;
      std::istringstream fields(line);
      std::string col;
      while (std::getline(fields, col, '\t')) cols.push_back(col);
      std::vector<std::string> names = {cols[0]};
      if (relation && cols.size() == 3) names.push_back(cols[2]);
      for (const auto& n : names) {
        QVERIFY2((*m)->FindInstruction(n) != nullptr, (path + ": " + n).c_str());
        ++checked;
      }
    }
  }
  QVERIFY(checked > 300);
}

QTEST_APPLESS_MAIN(TestHloConformanceParse)
#include "test_hlo_conformance_parse.moc"
