// shardscope: the GUI.
//   shardscope [FILE.hlo | PROJECT.shardscope]
//   shardscope --screenshot OUT.png [--example NAME] [--view NAME] [--select INSTRUCTION]
//              [--theme system|light|dark] [--size WxH] [FILE]
//   shardscope --state STATE.json ...   keeps STATE.json up to date with the window's state (for
//              sessions scripted with real input, see app/gui/window_state.h)
// --screenshot loads, waits for propagation and layout, renders the main window to a PNG and exits
// (0 on success, 2 on bad input, 1 when it cannot finish or write the image). It runs headless: the
// offscreen platform is used unless QT_QPA_PLATFORM says otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QIcon>
#include <QImage>
#include <QMessageBox>
#include <QPixmap>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>

#include "app/gui/main_window.h"
#include "app/gui/session.h"
#include "app/gui/window_state.h"
#include "app/pipeline/sources.h"
#include "shardscope_version.h"
#include "views/strategies_panel.h"

namespace {

bool WantsScreenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--screenshot") == 0 || std::strncmp(argv[i], "--screenshot=", 13) == 0) return true;
  }
  return false;
}

int Fail(int code, const QString& message) {
  std::fprintf(stderr, "shardscope: %s\n", qPrintable(message));
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const bool screenshot_mode = WantsScreenshot(argc, argv);
  if (screenshot_mode && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QApplication::setApplicationName("ShardScope");
  QApplication::setOrganizationName("ShardScope");
  QApplication::setApplicationVersion(SHARDSCOPE_VERSION);
  QApplication::setWindowIcon(QIcon(":/icons/shardscope.svg"));

  QCommandLineParser parser;
  parser.setApplicationDescription("Explore how an ML computation graph is sharded across a device mesh");
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption screenshot("screenshot", "Render the main window to OUT.png and exit.", "OUT.png");
  QCommandLineOption example("example", "Open the model-zoo example NAME.", "NAME");
  QCommandLineOption paper("paper",
                           "Open a published configuration (File > Examples > Paper configurations) and simulate "
                           "it: CASE:COLUMN, e.g. \"gspmd-table2:64B, 128 devices\" (shardscope-cli reproduce --list).",
                           "CASE:COLUMN");
  QCommandLineOption view("view", "Show a view: graph, partitioned, side-by-side, simulation, compare, teaching, shifting-buffer (a pipelined module's shifting buffer in the teaching panel), mesh, halo, inspector, instructions, history, strategies, strategies-compare (with --screenshot: after a search of the model on 8 devices; the fastest candidate opened, compared with another family's).", "NAME");
  QCommandLineOption state("state", "Keep FILE up to date with the window's state as JSON (for scripted sessions).", "FILE");
  QCommandLineOption select("select", "Select the instruction NAME.", "NAME");
  QCommandLineOption collective("collective",
                                "Step through the partitioned program's collective NAME in the teaching panel (its "
                                "instruction, e.g. all-to-all.3, or the instruction that caused it).",
                                "NAME");
  QCommandLineOption theme("theme", "Colour theme: system, light or dark.", "THEME");
  QCommandLineOption size("size", "Window size for --screenshot (default 1600x1000).", "WxH");
  QCommandLineOption timeout("timeout", "Seconds --screenshot waits for the engines (default 120).", "SECONDS");
  parser.addOptions({screenshot, example, paper, view, select, collective, theme, size, timeout, state});
  parser.addPositionalArgument("file", "An HLO module (.hlo) or a ShardScope project (.shardscope).", "[FILE]");
  parser.process(app);

  // A screenshot shows only the simulation runs it makes: a fresh run store unless SHARDSCOPE_RUN_DB
  // names one (declared before the window so it outlives the document's store).
  QTemporaryDir screenshot_runs;
  if (screenshot_mode && qEnvironmentVariableIsEmpty("SHARDSCOPE_RUN_DB") && screenshot_runs.isValid()) {
    qputenv("SHARDSCOPE_RUN_DB", screenshot_runs.filePath("runs.sqlite").toLocal8Bit());
  }
  shardscope::gui::MainWindow window;
  window.setBatchMode(screenshot_mode);
  if (!screenshot_mode) window.restoreSettings();
  if (parser.isSet(theme)) window.applyTheme(parser.value(theme));
  if (screenshot_mode) {
    int w = 1600, h = 1000;
    if (parser.isSet(size)) {
      const QStringList parts = parser.value(size).split('x');
      if (parts.size() != 2 || parts[0].toInt() < 200 || parts[1].toInt() < 200) {
        return Fail(2, QString("--size: expected WxH such as 1600x1000, got \"%1\"").arg(parser.value(size)));
      }
      w = parts[0].toInt();
      h = parts[1].toInt();
    }
    window.resize(w, h);
  }
  window.show();
  if (parser.isSet(state)) new shardscope::gui::WindowStateWriter(&window, parser.value(state));

  // What to open: a file, an example, or the default example so a new user sees something at once.
  QString error;
  bool opened = false;
  const QStringList files = parser.positionalArguments();
  if (!files.isEmpty()) {
    opened = window.openPath(files.first(), &error);
    if (!opened) {
      if (screenshot_mode) return Fail(2, error);
      QMessageBox box(QMessageBox::Critical, "Cannot open file", error, QMessageBox::Ok, &window);
      box.setTextInteractionFlags(Qt::TextSelectableByMouse);
      box.exec();
    }
  } else if (parser.isSet(paper)) {
    const QString v = parser.value(paper);
    const qsizetype colon = v.indexOf(':');
    if (colon <= 0) {
      error = QString("--paper: expected CASE:COLUMN such as \"gspmd-table2:64B, 128 devices\", got \"%1\"").arg(v);
    } else {
      opened = window.openPaperConfiguration(v.left(colon), v.mid(colon + 1), &error);
    }
    if (!opened) {
      if (screenshot_mode) return Fail(2, error);
      QMessageBox::critical(&window, "Cannot open the configuration", error);
    }
  } else if (parser.isSet(example)) {
    opened = window.openExample(parser.value(example), &error);
    if (!opened) {
      if (screenshot_mode) return Fail(2, error);
      QMessageBox::critical(&window, "Cannot open example", error);
    }
  }
  if (!opened && !(screenshot_mode && !files.isEmpty())) {
    QString ignored;
    if (window.openExample(QString::fromStdString(shardscope::pipeline::DefaultExample()), &ignored) &&
        !parser.isSet(select)) {
      window.selectInteresting();
    }
  }
  if (parser.isSet(select) && !window.selectInstruction(parser.value(select))) {
    if (screenshot_mode) return Fail(2, QString("--select: no instruction named \"%1\"").arg(parser.value(select)));
  }
  if (parser.isSet(collective) && !window.teachCollective(parser.value(collective))) {
    const QString msg = QString("--collective: nothing to partition for \"%1\"").arg(parser.value(collective));
    if (screenshot_mode) return Fail(2, msg);
    std::fprintf(stderr, "shardscope: %s\n", qPrintable(msg));
  }
  const QString view_name = parser.value(view).toLower();
  if (screenshot_mode && parser.isSet(view) && QStringList{"strategies", "search", "strategies-compare"}.contains(view_name)) {
    // What a user sees after a search: the ranked table and the chart with the fastest candidate
    // opened; strategies-compare: it compared with the fastest of another family.
    auto* panel = window.strategiesPanel();
    const bool compare = view_name == "strategies-compare";
    QObject::connect(panel, &shardscope::views::StrategiesPanel::resultsChanged, panel, [panel, compare] {
      const auto& rows = panel->results().rows;
      if (!compare) {
        if (!rows.empty()) panel->selectRows({0});
        return;
      }
      for (size_t i = 1; i < rows.size(); ++i) {
        if (rows[i].family != rows[0].family && rows[i].simulated) {
          panel->selectRows({0, static_cast<int>(i)});
          return;
        }
      }
      if (rows.size() >= 2) panel->selectRows({0, 1});
    }, Qt::SingleShotConnection);
    panel->startSearch();
  }
  if (parser.isSet(view) && !window.showView(parser.value(view))) {
    const QString msg = QString("--view: unknown panel \"%1\"").arg(parser.value(view));
    if (screenshot_mode) return Fail(2, msg);
    std::fprintf(stderr, "shardscope: %s\n", qPrintable(msg));
  }

  if (screenshot_mode) {
    // Saved once propagation, layout (and the partitioning or simulation a view asked for) are done;
    // the event loop keeps running meanwhile.
    const int seconds = parser.isSet(timeout) ? parser.value(timeout).toInt() : 120;
    const QString out = parser.value(screenshot);
    window.whenReady(std::max(1, seconds) * 1000, [&window, out](bool ready) {
      if (!ready) {
        std::fprintf(stderr, "shardscope: timed out waiting for propagation and layout\n");
        QCoreApplication::exit(1);
        return;
      }
      const QPixmap shot = window.grab();
      if (shot.isNull() || !shot.save(out)) {
        std::fprintf(stderr, "shardscope: cannot write %s\n", qPrintable(out));
        QCoreApplication::exit(1);
        return;
      }
      std::fprintf(stdout, "saved %s (%dx%d)\n", qPrintable(out), shot.width(), shot.height());
      QCoreApplication::exit(0);
    });
  }
  const int rc = app.exec();
  // Quitting never waits for a job that cannot stop mid-stage (a Graphviz layout may take minutes):
  // what would be lost is saved by now (settings when the window closed; a run is stored before it
  // is shown), so after a short grace for such writes the process ends without unwinding.
  QElapsedTimer grace;
  grace.start();
  while (!window.session()->idle() && grace.elapsed() < 2000) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(10);
  }
  if (!window.session()->idle()) {
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return rc;
}
