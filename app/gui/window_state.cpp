#include "app/gui/window_state.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QTabBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolButton>

#include "app/gui/main_window.h"
#include "app/gui/session.h"
#include "views/collective_stepper.h"
#include "views/comparison_view.h"
#include "views/document_model.h"
#include "views/graph_view.h"
#include "views/mesh_view.h"
#include "views/narrow_layout.h"
#include "views/partitioned_view.h"
#include "views/simulation_view.h"
#include "views/timeline_view.h"

namespace shardscope::gui {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

// The centre of `local` (in `w`'s coordinates) on the screen; null when `w` is not shown.
QJsonValue ScreenPoint(const QWidget* w, const QRect& local) {
  if (!w || !w->isVisible()) return QJsonValue();
  const QPoint c = w->mapToGlobal(local.center());
  return QJsonArray{c.x(), c.y()};
}

QJsonValue ScreenPoint(const QWidget* w) { return w ? ScreenPoint(w, w->rect()) : QJsonValue(); }

}  // namespace

QJsonObject WindowState(const MainWindow& window) {
  QJsonObject s;
  const views::DocumentModel* doc = window.document();
  s["title"] = window.windowTitle();
  s["mode"] = static_cast<int>(window.mode());
  s["sideBySide"] = window.sideBySide();
  s["module"] = doc->module() ? Q(doc->module()->name()) : QString();
  s["instructions"] = doc->module() ? static_cast<qint64>(doc->module()->instruction_count()) : 0;
  s["annotations"] = static_cast<qint64>(doc->annotations().size());
  const Instruction* selected = doc->instruction(doc->selected());
  s["selected"] = selected ? Q(selected->name()) : QString();
  s["selectedIsAnnotated"] = selected && doc->origin(selected->id()) == views::TensorOrigin::kUser;
  s["ready"] = window.isReady();
  const views::GraphView* graph = window.graphPane()->view();
  s["layoutPending"] = graph->isLayoutPending();
  s["layoutsApplied"] = graph->layoutsApplied();
  s["summary"] = window.summaryLabel()->fullText();
  s["message"] = window.messageLabel()->fullText();
  const views::CollectiveStepper* teaching = window.teachingPanel();
  s["teaching"] = QJsonObject{{"hasPlan", teaching->hasPlan()},
                              {"step", teaching->currentStep()},
                              {"steps", teaching->stepCount()},
                              {"title", teaching->titleText()}};
  QJsonArray compared;
  if (auto c = window.comparisonView()->comparedRuns()) compared = QJsonArray{static_cast<qint64>(c->first), static_cast<qint64>(c->second)};
  s["compared"] = compared;
  s["comparison"] = window.comparisonView()->statusLabel()->text();
  s["partition"] = window.partitionedView()->statusLabel()->text();
  const auto* run = window.simulationView()->timeline()->run();
  s["run"] = run ? static_cast<qint64>(run->id) : 0;

  // Where to click.
  QJsonObject at;
  QTabBar* tabs = window.modes()->tabBar();
  QJsonArray mode_tabs;
  for (int i = 0; i < tabs->count(); ++i) mode_tabs.append(ScreenPoint(tabs, tabs->tabRect(i)));
  at["modes"] = mode_tabs;
  at["replicate"] = ScreenPoint(window.meshView()->findChild<QPushButton*>("replicateButton"));
  for (QToolButton* b : window.graphPane()->findChildren<QToolButton*>()) {
    if (b->text() == "Expand all") at["expandAll"] = ScreenPoint(b);
    if (b->text() == "Collapse all") at["collapseAll"] = ScreenPoint(b);
  }
  // The graph's instruction nodes in view (at most 200).
  QJsonObject nodes;
  if (doc->module() && graph->isVisible() && !graph->isLayoutPending()) {
    const QRect viewport = graph->viewport()->rect();
    int n = 0;
    for (const auto& comp : doc->module()->computations()) {
      for (const auto& inst : comp->instructions()) {
        if (n >= 200) break;
        const views::GraphNodeItem* item = graph->nodeForInstruction(inst->id());
        if (!item) continue;
        const QRect r = graph->mapFromScene(item->sceneBoundingRect()).boundingRect();
        if (!viewport.contains(r.center())) continue;
        nodes[Q(inst->name())] = ScreenPoint(graph->viewport(), r);
        ++n;
      }
    }
  }
  at["nodes"] = nodes;
  s["at"] = at;
  return s;
}

WindowStateWriter::WindowStateWriter(const MainWindow* window, QString path, int interval_ms)
    : QObject(const_cast<MainWindow*>(window)), window_(window), path_(std::move(path)), timer_(new QTimer(this)) {
  connect(timer_, &QTimer::timeout, this, &WindowStateWriter::poll);
  timer_->start(interval_ms);
  poll();
}

void WindowStateWriter::poll() {
  const QByteArray json = QJsonDocument(WindowState(*window_)).toJson(QJsonDocument::Indented);
  if (json == last_) return;
  QSaveFile f(path_);
  if (f.open(QIODevice::WriteOnly) && f.write(json) == json.size() && f.commit()) last_ = json;
}

}  // namespace shardscope::gui
