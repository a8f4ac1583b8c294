#include "views/pipeline_figures.h"

#include <QGridLayout>
#include <QLabel>

#include "core/base/units.h"
#include "simulator/run_result.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

PipelineFigures::PipelineFigures(QWidget* parent)
    : QWidget(parent),
      title_(new QLabel),
      bubble_(new QLabel),
      recompute_(new QLabel),
      raw_(new QLabel),
      mfu_(new QLabel) {
  setObjectName("pipelineFigures");
  bubble_->setObjectName("pipelineBubble");
  recompute_->setObjectName("pipelineRecompute");
  raw_->setObjectName("pipelineRawUtilization");
  mfu_->setObjectName("pipelineMfu");
  const QString bubble_tip =
      "Bubble: compute time a device spends in the pipeline iterations in which its stage works on padding "
      "(the first and last stages - 1 iterations of each loop), as the \"Bubbles\" row of GSPMD Tables 4 and 5; "
      "mean over the devices, and its share of the step time. The timeline marks these iterations.";
  const QString recompute_tip =
      "Recompute: compute time of the forward work rematerialised in the backward pass (GPipe's "
      "rematerialisation; the \"Recompute\" row of GSPMD Tables 4 and 5); mean over the devices, and its share "
      "of the step time. Recompute that falls in a bubble iteration counts in both.";
  const QString raw_tip =
      "Raw FLOPS utilisation: every executed FLOP over the pod's peak, bubbles and recompute counted as useful - "
      "what a profiler reads (GSPMD Tables 4 and 5, \"raw FLOPS util\").";
  const QString mfu_tip =
      "MFU: the model's useful FLOPs over the pod's peak; neither padded microbatches nor recomputed "
      "activations count. The gap to the raw utilisation is what pipelining and rematerialisation cost.";
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(6, 2, 6, 2);
  grid->setVerticalSpacing(1);
  title_->setText("<b>Pipeline</b>");
  grid->addWidget(title_, 0, 0, 1, 2);
  const struct {
    const char* name;
    QLabel* value;
    QString tip;
  } rows[] = {{"bubble", bubble_, bubble_tip},
              {"recompute", recompute_, recompute_tip},
              {"raw FLOPS utilisation", raw_, raw_tip},
              {"MFU (true)", mfu_, mfu_tip}};
  int r = 1;
  for (const auto& row : rows) {
    auto* key = new QLabel(row.name);
    if (row.value == bubble_) bubble_key_ = key;
    key->setToolTip(row.tip);
    row.value->setToolTip(row.tip);
    row.value->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    row.value->setTextInteractionFlags(Qt::TextSelectableByMouse);
    grid->addWidget(key, r, 0);
    grid->addWidget(row.value, r, 1);
    ++r;
  }
  grid->setColumnStretch(0, 1);
  hide();
}

QString PipelineFigures::Percent(double fraction) { return Q(FormatPercent(fraction)); }

QString PipelineFigures::title() const {
  QString t = title_->text();
  return t.remove("<b>").remove("</b>");
}

void PipelineFigures::setSummary(const sim::RunSummary* s) {
  if (!s || (s->pipeline_stages <= 0 && s->recompute_time_s <= 0)) {
    for (QLabel* l : {bubble_, recompute_, raw_, mfu_}) l->clear();
    hide();
    return;
  }
  const bool pipelined = s->pipeline_stages > 0;
  title_->setText(pipelined ? QString("<b>Pipeline</b> (%1 stages)").arg(s->pipeline_stages) : QString("<b>Rematerialisation</b>"));
  bubble_key_->setVisible(pipelined);
  bubble_->setVisible(pipelined);
  if (!pipelined) bubble_->clear();
  else bubble_->setText(QString("%1 (%2)").arg(Q(FormatSeconds(s->bubble_time_s)), Percent(s->bubble_share())));
  recompute_->setText(QString("%1 (%2)").arg(Q(FormatSeconds(s->recompute_time_s)), Percent(s->recompute_share())));
  raw_->setText(Percent(s->raw_flops_utilization));
  mfu_->setText(Percent(s->mfu));
  show();
}

}  // namespace shardscope::views
