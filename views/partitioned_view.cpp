#include "views/partitioned_view.h"

#include <QCheckBox>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include "core/base/units.h"
#include "core/ir/ir.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/graph_view.h"
#include "views/item_models.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {
QString Q(const std::string& s) { return QString::fromStdString(s); }
}  // namespace

PartitionedView::PartitionedView(QWidget* parent)
    : QWidget(parent),
      spmd_doc_(new DocumentModel(this)),
      graph_(new GraphPane(this)),
      collectives_(new CollectiveTableModel(this)),
      table_(new QTableView(this)),
      text_(new QPlainTextEdit(this)),
      tabs_(new QTabWidget(this)),
      status_(new QLabel(this)),
      badge_(new QLabel(this)),
      device_(new QSpinBox(this)),
      button_(new QPushButton("Partition", this)),
      wus_(new QCheckBox("Weight-update sharding", this)),
      debounce_(new QTimer(this)) {
  setObjectName("partitionedView");
  spmd_doc_->setPropagationEnabled(false);
  graph_->setDocument(spmd_doc_);
  table_->setModel(collectives_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  table_->setToolTip("Click a collective to select the instruction that caused it; double-click to step through it\n"
                     "on the mesh in the Teaching panel.");
  text_->setReadOnly(true);
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  tabs_->addTab(graph_, "SPMD graph");
  tabs_->addTab(table_, "Collectives");
  tabs_->addTab(text_, "HLO");
  connect(tabs_, &QTabWidget::currentChanged, this, [this] { fillHloTextIfShown(); });
  button_->setToolTip("Run the SPMD partitioner on the current shardings");
  status_->setWordWrap(true);
  status_->setObjectName("partitionStatus");
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* side = new QPushButton("Side by side", this);
  side->setObjectName("sideBySide");
  side->setToolTip("Show the original graph and the partitioned one next to each other (Graph view)");
  auto* save = new QPushButton("Export HLO\u2026", this);
  save->setObjectName("exportPartitionedHlo");
  save->setToolTip("Write the partitioned program as HLO text (File \u25B8 Export)");
  // Two rows: the controls, then the status line with all the room it needs (never squeezed).
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 0);
  bar->addWidget(button_);
  bar->addWidget(new QLabel("Seen from", this));
  bar->addWidget(device_);
  bar->addStretch(1);
  bar->addWidget(side);
  bar->addWidget(save);
  auto* status_row = new QHBoxLayout;
  status_row->setContentsMargins(8, 0, 6, 2);
  // The toggle and the badge lead the status line: the controls' row keeps its width.
  status_row->addWidget(wus_, 0, Qt::AlignTop);
  status_row->addWidget(badge_, 0, Qt::AlignTop);
  status_row->addWidget(status_, 1);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(0, 0, 0, 0);
  col->setSpacing(2);
  col->addLayout(bar);
  col->addLayout(status_row);
  col->addWidget(tabs_, 1);
  connect(side, &QPushButton::clicked, this, &PartitionedView::sideBySideRequested);
  connect(save, &QPushButton::clicked, this, &PartitionedView::exportRequested);
  wus_->setObjectName("weightUpdateSharding");
  wus_->setToolTip("Shard the weight update across the data-parallel replicas (Xu et al., paper 000): each gradient\n"
                   "all-reduce becomes a reduce-scatter, every replica updates its shard of the weight and its\n"
                   "optimizer state, and the updated weight is all-gathered. Partitions (and simulates) again with\n"
                   "the pass; the Simulation panel then shows the step before and after side by side.");
  wus_->setEnabled(false);
  connect(wus_, &QCheckBox::toggled, this, [this](bool on) {
    if (!doc_ || !analysis_) return;
    doc_->setWeightUpdateSharding(on);  // re-partitions a program already shown (below)
    if (!analysis_->partitionBusy()) partitionNow();
  });
  debounce_->setSingleShot(true);
  debounce_->setInterval(300);
  connect(debounce_, &QTimer::timeout, this, &PartitionedView::partitionNow);
  connect(button_, &QPushButton::clicked, this, [this] {
    if (analysis_ && analysis_->partitionBusy()) analysis_->cancelPartition();
    else partitionNow();
  });
  connect(table_, &QTableView::clicked, this, [this](const QModelIndex& index) {
    const InsertedCollective* c = collectives_->at(index.row());
    if (!c || !doc_) return;
    if (const Instruction* origin = doc_->findInstruction(QString::fromStdString(c->origin))) doc_->select(origin->id());
    if (const Instruction* spmd = spmd_doc_->findInstruction(QString::fromStdString(c->instruction))) spmd_doc_->select(spmd->id());
  });
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    if (const InsertedCollective* c = collectives_->at(index.row())) emit collectiveActivated(*c, collectives_->participants(index.row()));
  });
  badge_->setObjectName("verificationBadge");
  badge_->setTextFormat(Qt::RichText);
  badge_->hide();
  device_->setObjectName("deviceChooser");
  device_->setRange(-1, 0);
  device_->setValue(-1);
  device_->setSpecialValueText("all devices");
  device_->setPrefix("device ");
  device_->setToolTip("Show the collectives as one device sees them: its replica group, whom it sends to and\n"
                      "receives from; collectives it takes no part in are greyed.");
  connect(device_, &QSpinBox::valueChanged, this, [this](int d) {
    collectives_->setDevice(d);
    table_->resizeColumnToContents(CollectiveTableModel::kGroups);
  });
  status_->setText("Press Partition to see the program every device runs.");
}

void PartitionedView::setModels(DocumentModel* doc, AnalysisModel* analysis, JobTracker* jobs) {
  if (doc_) doc_->disconnect(this);
  if (analysis_) analysis_->disconnect(this);
  doc_ = doc;
  analysis_ = analysis;
  graph_->setJobTracker(jobs);
  if (!doc_ || !analysis_) return;
  connect(analysis_, &AnalysisModel::partitionUpdated, this, &PartitionedView::onPartitionUpdated);
  connect(doc_, &DocumentModel::shardingsUpdated, this, [this] {
    if (auto_update_ && isVisible()) debounce_->start();
  });
  connect(doc_, &DocumentModel::selectionChanged, this, &PartitionedView::followSelection);
  connect(analysis_, &AnalysisModel::partitionCancelled, this, [this] {
    button_->setText("Partition");
    status_->setText("Partitioning cancelled.");
  });
  connect(analysis_, &AnalysisModel::analysisReset, this, &PartitionedView::onAnalysisReset);
  connect(doc_, &DocumentModel::weightUpdateShardingChanged, this, [this](bool on) {
    const QSignalBlocker block(wus_);
    wus_->setChecked(on);
    // The program shown (or being made) is partitioned again: the toggle, undo, redo.
    if (doc_->module() && (analysis_->partition().ok() || analysis_->partitionBusy())) partitionNow();
  });
  onAnalysisReset();
}

void PartitionedView::onAnalysisReset() {
  debounce_->stop();
  button_->setText("Partition");
  button_->setToolTip("Run the SPMD partitioner on the current shardings");
  collectives_->clear();
  text_->clear();
  text_stale_ = false;
  badge_->hide();
  device_->setMaximum(0);
  device_->setValue(-1);
  spmd_doc_->clear();
  {
    const QSignalBlocker block(wus_);
    wus_->setChecked(doc_ && doc_->weightUpdateSharding());
    wus_->setEnabled(doc_ && doc_->module());
  }
  status_->setText(doc_ && doc_->module() ? "Press Partition to see the program every device runs."
                                          : "Open a module to partition it.");
}

void PartitionedView::followSelection() {
  // Show what the selected instruction became in the SPMD program.
  if (!doc_ || !spmd_doc_->module()) return;
  const Instruction* inst = doc_->instruction(doc_->selected());
  if (!inst) return;
  if (!analysis_ || !analysis_->partition().ok()) return;
  const auto& became = analysis_->partition().result->origin_map;
  auto it = became.find(doc_->qualifiedName(inst).toStdString());
  if (it == became.end()) return;
  for (const std::string& name : it->second) {
    if (const Instruction* spmd = spmd_doc_->findInstruction(QString::fromStdString(name))) {
      spmd_doc_->select(spmd->id());
      graph_->view()->reveal(spmd->id());
      return;
    }
  }
}

void PartitionedView::setAutoUpdate(bool on) { auto_update_ = on; }

void PartitionedView::setDevice(int64_t device) { device_->setValue(static_cast<int>(device)); }
int64_t PartitionedView::device() const { return device_->value(); }

void PartitionedView::fillHloTextIfShown() {
  if (!text_stale_ || tabs_->currentWidget() != text_ || !analysis_) return;
  text_stale_ = false;
  const PartitionedProgram& p = analysis_->partition();
  if (p.ok()) text_->setPlainText(Q(p.Text()));
}

void PartitionedView::showCollectives() { tabs_->setCurrentWidget(table_); }

void PartitionedView::showVerdict() {
  const VerificationVerdict& v = analysis_->partition().verification;
  const std::string& twin = analysis_->partition().verification_twin;
  using S = VerificationVerdict::State;
  const std::string& detail = v.state == S::kMatch || v.state == S::kMismatch ? v.report.detail : v.reason;
  QString text, colour, tip = QString::fromStdString(detail).toHtmlEscaped();
  switch (v.state) {
    case S::kMatch:
      text = QString(twin.empty() ? "\u2714 verified: max |error| %1" : "\u2714 verified on a small twin: max |error| %1")
                 .arg(v.report.max_abs_error, 0, 'g', 2);
      colour = "#2e7d32";
      tip = QString("The SPMD program on %1 virtual devices computes the same result as the original on one "
                    "(random inputs; tolerance %2; %3 ms).<br>%4")
                .arg(analysis_->partition().devices)
                .arg(v.report.tolerance, 0, 'g', 2)
                .arg(v.millis, 0, 'f', 0)
                .arg(tip);
      break;
    case S::kMismatch:
      text = QString(twin.empty() ? "\u2718 mismatch: max |error| %1" : "\u2718 mismatch on a small twin: max |error| %1")
                 .arg(v.report.max_abs_error, 0, 'g', 3);
      colour = "#c62828";
      break;
    case S::kError:
      text = "\u26A0 not verified";
      colour = "#ef6c00";
      break;
    case S::kSkipped:
      // Beyond the size limits, or nothing to compare (a module reading infeed, ...): the reason
      // is the tooltip.
      text = v.reason.rfind("too large", 0) == 0        ? "not verified (too large)"
             : v.reason.rfind("ill-conditioned", 0) == 0 ? "not verified (ill-conditioned)"
                                                         : "not verified (not checkable)";
      colour = "#757575";
      break;
    case S::kNotRun:
      badge_->hide();
      return;
  }
  if (!twin.empty()) {
    // What was checked instead of the module itself, and why.
    const bool shrunk = twin.rfind("dimensions shrunk", 0) == 0;
    tip = QString(shrunk ? "The module at its sizes is not evaluated: %1. Checked instead: its small twin, the same "
                           "module with its %2, each dimension keeping its sharding, partitioned for the same %3 "
                           "devices (app/pipeline/small_twin.h, VerifyShrunkTwin).<br>%4"
                         : "The module at its sizes is not evaluated: %1. Checked instead: its small twin, the same "
                           "zoo model with %2, sharded as this one instruction by instruction and partitioned for the same "
                           "%3 devices (app/pipeline/small_twin.h).<br>%4")
              .arg(QString::fromStdString(analysis_->partition().verification_full_skipped).toHtmlEscaped(),
                   QString::fromStdString(twin).toHtmlEscaped())
              .arg(analysis_->partition().devices)
              .arg(tip);
  }
  badge_->setText(QString("<span style='color:white; background-color:%1;'>&nbsp;%2&nbsp;</span>")
                      .arg(colour, text.toHtmlEscaped()));
  badge_->setToolTip(tip.replace("\n", "<br>"));
  badge_->setProperty("verdict", static_cast<int>(v.state));
  badge_->show();
}

void PartitionedView::partitionNow() {
  if (!doc_ || !doc_->module() || !analysis_) return;
  status_->setText("Partitioning and verifying\u2026");
  button_->setText("Cancel");
  button_->setToolTip("Drop the running partitioning");
  analysis_->requestPartition();
}

void PartitionedView::onPartitionUpdated() {
  button_->setText("Partition");
  button_->setToolTip("Run the SPMD partitioner on the current shardings");
  const PartitionedProgram& p = analysis_->partition();
  if (!p.ok()) {
    status_->setText(Q(p.message));
    collectives_->clear();
    text_->clear();
    text_stale_ = false;
    badge_->hide();
    return;
  }
  QString msg = Q(p.message) + QString(" (%1 ms)").arg(p.millis, 0, 'f', 1);
  double total = 0;
  int halos = 0;
  for (size_t k = 0; k < p.estimates.size(); ++k) {
    if (p.estimates[k]) total += p.estimates[k]->time_s;
  }
  collectives_->setProgram(p.result, p.estimates, p.chip);
  for (int row = 0; row < collectives_->rowCount(); ++row) halos += collectives_->isHalo(row);
  if (halos) msg += QString(", %1 halo exchange%2").arg(halos).arg(halos == 1 ? "" : "s");
  if (total > 0) msg += QString("; %1 of communication on %2 if none overlaps").arg(Q(FormatSeconds(total)), Q(p.chip));
  if (!p.result->replicated_fallbacks.empty()) {
    QStringList ops;
    for (const auto& o : p.result->replicated_fallbacks) ops << Q(o);
    msg += "; partitioned by replication: " + ops.join(", ");
  }
  if (p.weight_update_sharding && !p.weight_update_summary.empty()) msg += "\n" + Q(p.weight_update_summary);
  status_->setText(msg);
  device_->setMaximum(static_cast<int>(p.devices) - 1);
  table_->resizeColumnsToContents();
  showVerdict();
  text_->clear();
  text_stale_ = true;
  fillHloTextIfShown();
  // Shared with the analysis (the aliasing pointer keeps the result alive), not copied.
  spmd_doc_->showModule(std::shared_ptr<const Module>(p.result, p.result->module.get()), doc_->mesh(), "spmd",
                        Q(p.result->module->name()));
  followSelection();
}

}  // namespace shardscope::views
