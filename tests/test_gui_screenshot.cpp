// Smoke test of the shardscope binary: --screenshot renders the default example (propagated and
// laid out) to a PNG that is not blank; a bad file exits 2 with FILE:LINE:COLUMN on stderr.
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QSet>
#include <QTemporaryDir>
#include <QtTest>
#include "tests/built_paths.h"

namespace {

QProcessEnvironment Env() {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QT_QPA_PLATFORM", "offscreen");
  return env;
}

struct Run {
  int exit_code = -1;
  QString out, err;
};

Run Shardscope(const QStringList& args) {
  QProcess p;
  p.setProcessEnvironment(Env());
  p.start(SHARDSCOPE_GUI_PATH, args);
  Run r;
  if (!p.waitForFinished(300000)) {
    p.kill();
    r.err = "timed out";
    return r;
  }
  r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

}  // namespace

class TestGuiScreenshot : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (!QFileInfo::exists(SHARDSCOPE_GUI_PATH)) QSKIP("the shardscope binary is not built (ninja shardscope)");
  }

  void defaultExampleIsNotBlank() {
    QTemporaryDir dir;
    const QString png = dir.filePath("shot.png");
    const Run r = Shardscope({"--screenshot", png, "--size", "1280x800"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QImage image(png);
    QVERIFY(!image.isNull());
    QCOMPARE(image.size(), QSize(1280, 800));
    // Many distinct colours (sharding colours, text, tiles), and not one flat colour.
    QSet<QRgb> colours;
    double sum = 0, sum2 = 0;
    int n = 0;
    for (int y = 0; y < image.height(); y += 2) {
      for (int x = 0; x < image.width(); x += 2) {
        const QRgb c = image.pixel(x, y);
        colours.insert(c);
        const double l = qGray(c);
        sum += l;
        sum2 += l * l;
        ++n;
      }
    }
    const double mean = sum / n, stddev = std::sqrt(std::max(0.0, sum2 / n - mean * mean));
    QVERIFY2(colours.size() > 200, qPrintable(QString("only %1 colours").arg(colours.size())));
    QVERIFY2(stddev > 10, qPrintable(QString("grey-level stddev %1").arg(stddev)));
    // Saturated pixels exist: sharding colours were painted, not just greys.
    int saturated = 0;
    for (QRgb c : colours) {
      if (QColor(c).hsvSaturation() > 60) ++saturated;
    }
    QVERIFY2(saturated > 20, qPrintable(QString("%1 saturated colours").arg(saturated)));
  }

  void darkThemeIsDark() {
    QTemporaryDir dir;
    const QString png = dir.filePath("dark.png");
    const Run r = Shardscope({"--screenshot", png, "--theme", "dark", "--size", "1000x700"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QImage image(png);
    QVERIFY(!image.isNull());
    double sum = 0;
    int n = 0;
    for (int y = 0; y < image.height(); y += 4) {
      for (int x = 0; x < image.width(); x += 4, ++n) sum += qGray(image.pixel(x, y));
    }
    QVERIFY2(sum / n < 110, qPrintable(QString("mean grey %1").arg(sum / n)));
  }

  void badFileExitsTwoWithPosition() {
    QTemporaryDir dir;
    const QString hlo = dir.filePath("broken.hlo");
    QFile f(hlo);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("HloModule m\n\nENTRY main {\n  a = f32[4] parameter(0)\n  ROOT b = f32[4] add(a, nope)\n}\n");
    f.close();
    const QString png = dir.filePath("never.png");
    const Run r = Shardscope({"--screenshot", png, hlo});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(QRegularExpression("broken\\.hlo:5:\\d+").match(r.err).hasMatch(), qPrintable(r.err));
    QVERIFY(!QFile::exists(png));
    const Run missing = Shardscope({"--screenshot", png, dir.filePath("missing.hlo")});
    QCOMPARE(missing.exit_code, 2);
    QVERIFY(missing.err.contains("no such file"));
    const Run view = Shardscope({"--screenshot", png, "--view", "nonsense"});
    QCOMPARE(view.exit_code, 2);
  }
};

QTEST_GUILESS_MAIN(TestGuiScreenshot)
#include "test_gui_screenshot.moc"
