// The inspector: everything about the selected tensor, and the "why" chain — where its sharding
// came from, step by step back to a user annotation (partitioner/propagation's provenance). Every
// instruction named in it is a link that selects that instruction.
#pragma once

#include <QPointer>
#include <QWidget>

class QTextBrowser;

namespace shardscope::views {

class AnalysisModel;
class DocumentModel;

class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit InspectorPanel(QWidget* parent = nullptr);
  void setDocument(DocumentModel* doc);
  // The partitioned program (what the selected instruction became, the collectives it needs).
  void setAnalysis(AnalysisModel* analysis);
  // The HTML currently shown (for tests).
  QString html() const;
  QTextBrowser* browser() const { return browser_; }
  QSize sizeHint() const override { return QSize(460, 260); }

 public slots:
  void refresh();

 private:
  QPointer<DocumentModel> doc_;
  QPointer<AnalysisModel> analysis_;
  QTextBrowser* browser_;
};

}  // namespace shardscope::views
