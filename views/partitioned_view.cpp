#include "views/partitioned_view.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include "core/ir.h"
#include "views/document.h"
#include "views/graph_view.h"
#include "views/item_models.h"

namespace shardscope::views {

PartitionedView::PartitionedView(QWidget* parent)
    : QWidget(parent),
      spmd_doc_(new Document(this)),
      graph_(new GraphPane(this)),
      collectives_(new CollectiveTableModel(this)),
      table_(new QTableView(this)),
      text_(new QPlainTextEdit(this)),
      tabs_(new QTabWidget(this)),
      status_(new QLabel(this)),
      button_(new QPushButton("Partition", this)),
      debounce_(new QTimer(this)) {
  setObjectName("partitionedView");
  spmd_doc_->setPropagationEnabled(false);
  graph_->setDocument(spmd_doc_);
  table_->setModel(collectives_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  text_->setReadOnly(true);
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  text_->setLineWrapMode(QPlainTextEdit::NoWrap);
  tabs_->addTab(graph_, "SPMD graph");
  tabs_->addTab(table_, "Collectives");
  tabs_->addTab(text_, "HLO");
  button_->setToolTip("Run the SPMD partitioner on the current shardings");
  status_->setWordWrap(true);
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 0);
  bar->addWidget(button_);
  bar->addWidget(status_, 1);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(0, 0, 0, 0);
  col->addLayout(bar);
  col->addWidget(tabs_, 1);
  debounce_->setSingleShot(true);
  debounce_->setInterval(300);
  connect(debounce_, &QTimer::timeout, this, &PartitionedView::partitionNow);
  connect(button_, &QPushButton::clicked, this, &PartitionedView::partitionNow);
  connect(table_, &QTableView::clicked, this, [this](const QModelIndex& index) {
    const CollectiveInfo* c = collectives_->at(index.row());
    if (!c || !doc_) return;
    if (const Instruction* origin = doc_->findInstruction(QString::fromStdString(c->origin))) doc_->select(origin->id());
    if (const Instruction* spmd = spmd_doc_->findInstruction(QString::fromStdString(c->instruction))) spmd_doc_->select(spmd->id());
  });
  status_->setText("Press Partition to see the program every device runs.");
}

void PartitionedView::setDocument(Document* doc) {
  if (doc_) doc_->disconnect(this);
  doc_ = doc;
  if (!doc_) return;
  connect(doc_, &Document::partitionUpdated, this, &PartitionedView::onPartitionUpdated);
  connect(doc_, &Document::shardingsUpdated, this, [this] {
    if (auto_update_ && isVisible()) debounce_->start();
  });
  connect(doc_, &Document::selectionChanged, this, &PartitionedView::followSelection);
}

void PartitionedView::followSelection() {
  // Show what the selected instruction became in the SPMD program.
  if (!doc_ || !spmd_doc_->module()) return;
  const Instruction* inst = doc_->instruction(doc_->selected());
  if (!inst) return;
  const auto& became = doc_->partition().became;
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

void PartitionedView::partitionNow() {
  if (!doc_ || !doc_->module()) return;
  status_->setText("Partitioning\u2026");
  button_->setEnabled(false);
  doc_->requestPartition();
}

void PartitionedView::onPartitionUpdated() {
  button_->setEnabled(true);
  const PartitionOutput& p = doc_->partition();
  if (!p.ok || !p.spmd) {
    status_->setText(QString::fromStdString(p.message));
    collectives_->setCollectives({});
    text_->clear();
    return;
  }
  QString msg = QString::fromStdString(p.message) + QString(" (%1 ms)").arg(p.millis, 0, 'f', 1);
  if (!p.replicated_fallbacks.empty()) {
    QStringList ops;
    for (const auto& o : p.replicated_fallbacks) ops << QString::fromStdString(o);
    msg += "; partitioned by replication: " + ops.join(", ");
  }
  status_->setText(msg);
  collectives_->setCollectives(p.collectives);
  table_->resizeColumnsToContents();
  text_->setPlainText(QString::fromStdString(p.spmd_text));
  spmd_doc_->setModule(p.spmd->Clone(), doc_->mesh(), "spmd", QString::fromStdString(p.spmd->name()));
  followSelection();
}

}  // namespace shardscope::views
