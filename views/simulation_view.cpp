#include "views/simulation_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "views/document.h"
#include "views/item_models.h"
#include "views/memory_chart.h"
#include "views/sharding_style.h"
#include "views/timeline_view.h"

namespace shardscope::views {

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

SimulationView::SimulationView(QWidget* parent)
    : QWidget(parent),
      chip_(new QComboBox),
      button_(new QPushButton("Simulate")),
      status_(new QLabel),
      timeline_(new TimelineWidget),
      chart_(MemoryChart::Create()),
      history_(new RunHistoryModel(this)),
      table_(new QTableView),
      summary_(new QTextBrowser) {
  setObjectName("simulationView");
  for (const auto& c : ChipPresets()) chip_->addItem(Q(c));
  chip_->setCurrentText(Q(DefaultChip()));
  chip_->setToolTip("The chip generation of the simulated pod (a slice shaped like the mesh)");
  button_->setToolTip("Partition the current shardings and simulate one step (F5)");
  button_->setShortcut(QKeySequence("F5"));
  status_->setWordWrap(true);
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 0);
  bar->addWidget(new QLabel("Chip:"));
  bar->addWidget(chip_);
  bar->addWidget(button_);
  bar->addWidget(status_, 1);

  auto* scroll = new QScrollArea;
  scroll->setWidget(timeline_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* left = new QSplitter(Qt::Vertical);
  left->addWidget(scroll);
  left->addWidget(chart_);
  left->setStretchFactor(0, 1);
  left->setStretchFactor(1, 1);
  table_->setModel(history_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(table_);
  right->addWidget(summary_);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(0, 0, 0, 0);
  col->addLayout(bar);
  col->addWidget(split, 1);

  connect(button_, &QPushButton::clicked, this, &SimulationView::simulate);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (const RunOverview* r = history_->at(current.row())) showRun(r->id);
  });
  if (ChipPresets().empty()) {
    button_->setEnabled(false);
    status_->setText("The simulator is not built into this binary.");
  } else {
    status_->setText("Press Simulate to run one step of the partitioned program on a simulated pod.");
  }
}

void SimulationView::setDocument(Document* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (!doc_) return;
  connect(doc_, &Document::simulationUpdated, this, &SimulationView::onSimulationUpdated);
  connect(doc_, &Document::moduleReset, this, [this] {
    history_->setRuns({});
    timeline_->setRun(nullptr);
    chart_->clear();
    summary_->clear();
  });
}

void SimulationView::simulate() {
  if (!doc_ || !doc_->module()) return;
  button_->setEnabled(false);
  status_->setText(QString("Simulating on %1\u2026").arg(chip_->currentText()));
  doc_->requestSimulation(chip_->currentText());
}

void SimulationView::onSimulationUpdated() {
  button_->setEnabled(true);
  const SimulationOutput& s = doc_->simulation();
  if (!s.ok || !s.run) {
    status_->setText(Q(s.message));
    return;
  }
  const RunSummary& sum = s.run->summary;
  status_->setText(QString("Step %1 \u00B7 MFU %2% \u00B7 peak %3/device \u00B7 %4 collectives (%5 ms)")
                       .arg(FormatSeconds(sum.step_time_s))
                       .arg(sum.mfu * 100, 0, 'f', 1)
                       .arg(FormatBytes(sum.peak_memory_bytes))
                       .arg(s.collectives)
                       .arg(s.millis, 0, 'f', 0));
  history_->addRun(OverviewOf(*s.run));
  QSignalBlocker block(table_->selectionModel());
  table_->selectRow(history_->rowCount() - 1);
  table_->resizeColumnsToContents();
  show(s.run);
}

bool SimulationView::showRun(int64_t run_id) {
  if (!doc_) return false;
  for (const auto& r : doc_->runs()) {
    if (r->id == run_id) {
      show(r);
      return true;
    }
  }
  return false;
}

void SimulationView::show(std::shared_ptr<const RunResult> run) {
  timeline_->setRun(run);
  if (!run) return;
  // Memory of the device class holding the peak.
  const DeviceClass* peak = nullptr;
  for (const auto& c : run->classes) {
    if (!peak || c.peak_memory_bytes > peak->peak_memory_bytes) peak = &c;
  }
  if (peak) {
    std::vector<MemoryChart::Series> series;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      MemoryChart::Series s;
      s.name = Q(std::string(MemoryCategoryName(static_cast<MemoryCategory>(c))));
      s.color = QColor::fromHsl((c * 67 + 200) % 360, 160, IsDarkPalette(palette()) ? 120 : 110);
      bool any = false;
      for (const auto& m : peak->memory) {
        s.points.push_back({m.time_s, static_cast<double>(m.bytes[static_cast<size_t>(c)])});
        any |= m.bytes[static_cast<size_t>(c)] > 0;
      }
      if (any) series.push_back(std::move(s));
    }
    MemoryChart::Series total;
    total.name = "total";
    total.color = palette().color(QPalette::Text);
    total.emphasise = true;
    for (const auto& m : peak->memory) total.points.push_back({m.time_s, static_cast<double>(m.total())});
    series.push_back(std::move(total));
    chart_->setSeries(QString("Memory per device (peak %1)").arg(FormatBytes(peak->peak_memory_bytes)), std::move(series),
                      peak->peak_memory_time_s);
  }
  // Summary: headline figures, the collectives and the biggest buffers at the peak.
  const RunSummary& s = run->summary;
  QString h = QString("<h4>Run %1</h4><p><small>%2</small></p>").arg(run->id).arg(Q(run->label).toHtmlEscaped());
  h += "<table cellspacing=2>";
  auto row = [&](const QString& k, const QString& v) { h += QString("<tr><td>%1</td><td align=right><b>%2</b></td></tr>").arg(k, v); };
  row("step time", FormatSeconds(s.step_time_s));
  row("compute", FormatSeconds(s.compute_time_s));
  row("communication", FormatSeconds(s.communication_time_s));
  row("exposed communication", FormatSeconds(s.exposed_communication_s));
  row("idle", FormatSeconds(s.idle_time_s));
  row("MFU", QString("%1%").arg(s.mfu * 100, 0, 'f', 1));
  row("peak memory / device", FormatBytes(s.peak_memory_bytes));
  row("bytes communicated", FormatBytes(s.bytes_communicated));
  row("device classes", QString::number(run->classes.size()));
  h += "</table>";
  if (!run->collectives.empty()) {
    h += "<p><b>Collectives</b></p><table cellspacing=2>";
    for (const auto& c : run->collectives) {
      h += QString("<tr><td>%1</td><td>%2</td><td align=right>%3</td><td align=right>%4</td><td><small>%5</small></td></tr>")
               .arg(Q(c.kind).toHtmlEscaped(), Q(c.instruction).toHtmlEscaped(), FormatBytes(c.bytes), FormatSeconds(c.time_s),
                    Q(c.regime).toHtmlEscaped());
    }
    h += "</table>";
  }
  if (peak && !peak->peak_buffers.empty()) {
    auto buffers = peak->peak_buffers;
    std::sort(buffers.begin(), buffers.end(), [](const PeakBuffer& a, const PeakBuffer& b) { return a.bytes > b.bytes; });
    h += "<p><b>Largest buffers at the peak</b></p><table cellspacing=2>";
    for (size_t i = 0; i < buffers.size() && i < 8; ++i) {
      h += QString("<tr><td>%1</td><td align=right>%2</td><td><small>%3</small></td></tr>")
               .arg(Q(buffers[i].name).toHtmlEscaped(), FormatBytes(buffers[i].bytes),
                    Q(std::string(MemoryCategoryName(buffers[i].category))));
    }
    h += "</table>";
  }
  const SimulationOutput& sim = doc_->simulation();
  if (sim.run && sim.run->id == run->id && !sim.warnings.empty()) {
    h += "<p><b>Warnings</b><br>";
    for (const auto& w : sim.warnings) h += Q(w).toHtmlEscaped() + "<br>";
    h += "</p>";
  }
  summary_->setHtml(h);
}

}  // namespace shardscope::views
