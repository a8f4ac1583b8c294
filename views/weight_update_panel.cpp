#include "views/weight_update_panel.h"

#include <QHeaderView>
#include <QLabel>
#include <QResizeEvent>
#include <QTableWidget>
#include <QVBoxLayout>

#include "core/base/units.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

// "Optimizer state" from "optimizer_state".
QString CategoryTitle(MemoryCategory c) {
  QString s = Q(std::string(MemoryCategoryName(c))).replace('_', ' ');
  if (!s.isEmpty()) s[0] = s[0].toUpper();
  return s;
}

// "-20.9 ms (45%)" / "+1.2 MiB": after minus before, and the share of before saved.
QString Saving(double before, double after, bool bytes) {
  const double d = after - before;
  if (before <= 0 && after <= 0) return QString::fromUtf8("\u2014");
  QString amount = bytes ? Q(FormatBytes(std::abs(d))) : Q(FormatSeconds(std::abs(d)));
  QString text = (d < 0 ? QString::fromUtf8("\u2212") : QString("+")) + amount;
  if (d < 0 && before > 0) text += QString(" (%1)").arg(Q(FormatPercent(-d / before)));
  return text;
}

}  // namespace

WeightUpdatePanel::WeightUpdatePanel(QWidget* parent)
    : QWidget(parent), headline_(new QLabel(this)), table_(new QTableWidget(this)) {
  setObjectName("weightUpdatePanel");
  headline_->setObjectName("weightUpdateHeadline");
  headline_->setWordWrap(true);
  headline_->setTextFormat(Qt::RichText);
  table_->setObjectName("weightUpdateTable");
  table_->setRowCount(3);
  table_->setVerticalHeaderLabels({"Before", "After", "Saving"});
  table_->setColumnCount(kFirstCategory + kNumMemoryCategories);
  // Two-line headers where a narrow window would cut them.
  QStringList columns = {"Step", "Weight\nupdate", "Peak\nmemory"};
  for (int k = 0; k < kNumMemoryCategories; ++k) columns << CategoryTitle(static_cast<MemoryCategory>(k)).replace(' ', '\n');
  table_->setHorizontalHeaderLabels(columns);
  for (int k = kFirstCategory; k < table_->columnCount(); ++k)
    table_->horizontalHeaderItem(k)->setToolTip("Bytes of this category live at the peak (per device)");
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->setWordWrap(true);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  // It never widens the window's centre (the docks keep their share): the columns share whatever
  // width there is, the height is the three rows'.
  table_->horizontalHeader()->setMinimumSectionSize(24);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  table_->setMinimumWidth(0);
  table_->setToolTip("One simulated step without and with weight-update sharding (paper 000): the replicas split the\n"
                     "optimizer's update (reduce-scatter, update on a shard, all-gather) instead of each repeating it.\n"
                     "Weight update: compute time of the ops after the gradient reduction. Memory rows: what a\n"
                     "device holds at its peak, by category.");
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(6, 2, 6, 2);
  col->setSpacing(2);
  col->addWidget(headline_);
  col->addWidget(table_, 1);
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
  setComparison(std::nullopt);
}

void WeightUpdatePanel::setComparison(const std::optional<WeightUpdateComparison>& comparison) {
  comparison_ = comparison;
  setVisible(comparison_.has_value());
  for (int r = 0; r < table_->rowCount(); ++r)
    for (int c = 0; c < table_->columnCount(); ++c) table_->setItem(r, c, new QTableWidgetItem);
  if (!comparison_) {
    headline_->clear();
    return;
  }
  const StepFigures& b = comparison_->before;
  const StepFigures& a = comparison_->after;
  auto set = [this](int column, double before, double after, bool bytes) {
    auto text = [bytes](double v) { return bytes ? Q(FormatBytes(v)) : Q(FormatSeconds(v)); };
    table_->item(kBefore, column)->setText(text(before));
    table_->item(kAfter, column)->setText(text(after));
    table_->item(kSaving, column)->setText(Saving(before, after, bytes));
    for (int r = 0; r < 3; ++r) table_->item(r, column)->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  };
  set(kStep, b.step_time_s, a.step_time_s, false);
  set(kWeightUpdate, b.weight_update_s, a.weight_update_s, false);
  set(kPeak, static_cast<double>(b.peak_memory_bytes), static_cast<double>(a.peak_memory_bytes), true);
  for (int k = 0; k < kNumMemoryCategories; ++k)
    set(kFirstCategory + k, static_cast<double>(b.peak_by_category[static_cast<size_t>(k)]),
        static_cast<double>(a.peak_by_category[static_cast<size_t>(k)]), true);
  const double speedup = a.step_time_s > 0 ? b.step_time_s / a.step_time_s : 0;
  headline_->setText(QString("<b>Weight-update sharding</b>: %1 of %2 gradient all-reduces sharded; step %3 \u2192 %4 "
                             "(%5\u00D7), peak %6 \u2192 %7 per device")
                         .arg(comparison_->sharded)
                         .arg(comparison_->all_reduces)
                         .arg(Q(FormatSeconds(b.step_time_s)), Q(FormatSeconds(a.step_time_s)))
                         .arg(speedup, 0, 'f', 2)
                         .arg(Q(FormatBytes(static_cast<double>(b.peak_memory_bytes))),
                              Q(FormatBytes(static_cast<double>(a.peak_memory_bytes)))));
  headline_->setToolTip(Q(comparison_->summary));
  fitHeight();
}

void WeightUpdatePanel::fitHeight() {
  table_->resizeRowsToContents();
  int h = table_->horizontalHeader()->sizeHint().height() + 2 * table_->frameWidth();
  for (int r = 0; r < table_->rowCount(); ++r) h += table_->rowHeight(r);
  table_->setFixedHeight(h);
}

void WeightUpdatePanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (comparison_) fitHeight();  // the saving wraps in narrow columns
}

}  // namespace shardscope::views
