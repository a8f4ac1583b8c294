#include "views/shifting_buffer_view.h"

#include <algorithm>
#include <functional>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QShortcut>
#include <QTableWidget>
#include <QVBoxLayout>

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

// "0, 1" or "0, 1, 2, ..., 15 (16 devices)".
QString DevicesText(const std::vector<int64_t>& d) {
  QStringList parts;
  const size_t shown = d.size() <= 4 ? d.size() : 3;
  for (size_t i = 0; i < shown; ++i) parts << QString::number(d[i]);
  QString out = parts.join(", ");
  if (shown < d.size()) out += QString(", ..., %1 (%2 devices)").arg(d.back()).arg(d.size());
  return out;
}

}  // namespace

ShiftingBufferView::ShiftingBufferView(QWidget* parent)
    : QWidget(parent),
      title_(new QLabel),
      caption_(new QLabel),
      position_(new QLabel),
      prev_(new QPushButton("◀ Previous")),
      next_(new QPushButton("Next ▶")),
      table_(new QTableWidget(0, kColumns)) {
  setObjectName("shiftingBuffer");
  title_->setObjectName("shiftingBufferTitle");
  title_->setWordWrap(true);
  caption_->setObjectName("shiftingBufferCaption");
  caption_->setWordWrap(true);
  caption_->setTextFormat(Qt::PlainText);
  table_->setObjectName("shiftingBufferTable");
  table_->setHorizontalHeaderLabels({"Stage", "Devices", "Before the shift", "Shift sends to", "After the shift (computes on)"});
  table_->horizontalHeaderItem(kBefore)->setToolTip("What the stage computed on in the previous iteration");
  table_->horizontalHeaderItem(kSendsTo)->setToolTip(
      "The stage the shift's collective-permute sends this stage's buffer to (every device of the stage sends to the "
      "device one step along the stage axis)");
  table_->horizontalHeaderItem(kAfter)->setToolTip(
      "What the stage holds after the shift and computes on in this iteration; padding is the pipeline bubble");
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->setFocusPolicy(Qt::NoFocus);  // ← → step the iterations
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  prev_->setToolTip("The previous iteration (←)");
  next_->setToolTip("The next iteration (→)");
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(0, 0, 0, 0);
  bar->addWidget(prev_);
  bar->addWidget(next_);
  bar->addWidget(position_);
  bar->addStretch(1);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(8, 6, 8, 6);
  col->addWidget(title_);
  col->addLayout(bar);
  col->addWidget(caption_);
  col->addWidget(table_);
  setFocusPolicy(Qt::StrongFocus);
  connect(prev_, &QPushButton::clicked, this, &ShiftingBufferView::previous);
  connect(next_, &QPushButton::clicked, this, &ShiftingBufferView::next);
  const std::pair<QKeySequence, std::function<void()>> keys[] = {
      {QKeySequence(Qt::Key_Right), [this] { next(); }},
      {QKeySequence(Qt::Key_Left), [this] { previous(); }},
      {QKeySequence(Qt::Key_Home), [this] { setIteration(0); }},
      {QKeySequence(Qt::Key_End), [this] { setIteration(iterationCount() - 1); }}};
  for (const auto& [key, fn] : keys) {
    auto* sc = new QShortcut(key, this);
    sc->setContext(Qt::WidgetWithChildrenShortcut);
    connect(sc, &QShortcut::activated, this, fn);
  }
  hide();
}

void ShiftingBufferView::setSchedule(std::optional<sim::ShiftingBufferSchedule> schedule) {
  schedule_ = std::move(schedule);
  iteration_ = 0;
  setVisible(schedule_.has_value());
  refresh();
}

int ShiftingBufferView::iterationCount() const { return schedule_ ? static_cast<int>(schedule_->iterations.size()) : 0; }

void ShiftingBufferView::setIteration(int iteration) {
  const int t = std::clamp(iteration, 0, std::max(0, iterationCount() - 1));
  if (t == iteration_) return;
  iteration_ = t;
  refresh();
  emit iterationChanged(iteration_);
}

void ShiftingBufferView::next() { setIteration(iteration_ + 1); }
void ShiftingBufferView::previous() { setIteration(iteration_ - 1); }

QString ShiftingBufferView::titleText() const { return title_->text(); }
QString ShiftingBufferView::captionText() const { return caption_->text(); }

QString ShiftingBufferView::cellText(int stage, Column column) const {
  const QTableWidgetItem* item = table_->item(stage, column);
  return item ? item->text() : QString();
}

bool ShiftingBufferView::isBubble(int stage) const {
  if (!schedule_ || iteration_ >= iterationCount()) return false;
  const auto& b = schedule_->iterations[static_cast<size_t>(iteration_)].bubble;
  return stage >= 0 && static_cast<size_t>(stage) < b.size() && b[static_cast<size_t>(stage)];
}

void ShiftingBufferView::refresh() {
  table_->setRowCount(0);
  if (!schedule_ || schedule_->iterations.empty()) {
    title_->clear();
    caption_->clear();
    position_->clear();
    prev_->setEnabled(false);
    next_->setEnabled(false);
    return;
  }
  const sim::ShiftingBufferSchedule& s = *schedule_;
  const auto& set = s.settings;
  const int64_t L = set.stages;
  title_->setText(QString("<b>Shifting buffer</b> — %1, %2 stages × %3 microbatches%4: %5 iterations, each stage computes "
                          "on padding (the bubble) in %6 of them")
                      .arg(set.circular ? "circular schedule" : "GPipe")
                      .arg(L)
                      .arg(set.microbatches)
                      .arg(set.circular ? QString(" × %1 rounds").arg(set.layers_per_stage) : QString())
                      .arg(s.trips)
                      .arg(L - 1));
  const sim::ShiftingBufferIteration& it = s.iterations[static_cast<size_t>(iteration_)];
  position_->setText(QString("iteration %1 of %2").arg(iteration_ + 1).arg(s.trips));
  prev_->setEnabled(iteration_ > 0);
  next_->setEnabled(iteration_ + 1 < iterationCount());

  std::vector<int64_t> target(static_cast<size_t>(L), -1);
  for (const auto& [a, b] : it.stage_pairs) target[static_cast<size_t>(a)] = b;
  QStringList bubble;
  for (int64_t st = 0; st < L; ++st)
    if (it.bubble[static_cast<size_t>(st)]) bubble << QString::number(st);
  QString caption = QString("Iteration %1 (t = %2): one collective-permute shifts the buffer one stage along %3 (%4 "
                            "device pairs)")
                        .arg(iteration_ + 1)
                        .arg(it.iteration)
                        .arg(set.mesh.num_axes() > 0 && set.stage_axis >= 0
                                 ? Q(set.mesh.axes()[static_cast<size_t>(set.stage_axis)].name)
                                 : QString("the stages"))
                        .arg(it.device_pairs.size());
  caption += set.circular ? QString("; the last stage's buffer wraps round to stage 0.") : QString("; stage 0 takes the next microbatch.");
  caption += bubble.isEmpty() ? QString(" Every stage computes on a real microbatch.")
                              : QString(" Bubble: stage%1 %2 compute%3 on padding.")
                                    .arg(bubble.size() > 1 ? "s" : "", bubble.join(", "), bubble.size() > 1 ? "" : "s");
  caption_->setText(caption);

  table_->setRowCount(static_cast<int>(L));
  const QColor bubble_bg = palette().color(QPalette::Mid).lighter(130);
  for (int64_t st = 0; st < L; ++st) {
    const int row = static_cast<int>(st);
    auto put = [&](Column c, const QString& text) {
      auto* item = new QTableWidgetItem(text);
      table_->setItem(row, c, item);
      return item;
    };
    put(kStage, QString::number(st));
    put(kDevices, DevicesText(s.devices_of_stage[static_cast<size_t>(st)]));
    const sim::BufferSlot& before = it.before[static_cast<size_t>(st)];
    const sim::BufferSlot& after = it.after[static_cast<size_t>(st)];
    auto* b = put(kBefore, Q(s.SlotText(before)));
    if (before.padding()) b->setForeground(palette().color(QPalette::PlaceholderText));
    const int64_t to = target[static_cast<size_t>(st)];
    put(kSendsTo, to < 0 ? QString("— (leaves the pipeline)") : QString("→ stage %1").arg(to));
    auto* a = put(kAfter, after.padding() ? QString("padding — bubble") : Q(s.SlotText(after)));
    if (after.padding()) {
      for (int c = 0; c < kColumns; ++c) table_->item(row, c)->setBackground(bubble_bg);
      a->setToolTip("This stage computes on padding in this iteration: pipeline bubble");
    }
  }
  // Tall enough for every stage (up to 16 rows without scrolling).
  int h = table_->horizontalHeader()->height() + 2 * table_->frameWidth();
  for (int r = 0; r < std::min<int>(static_cast<int>(L), 16); ++r) h += table_->rowHeight(r);
  table_->setMinimumHeight(h);
  table_->setMaximumHeight(static_cast<int>(L) <= 16 ? h : QWIDGETSIZE_MAX);
}

}  // namespace shardscope::views
