// The inspector: everything about the selected tensor, and the "why" chain — where its sharding
// came from, step by step back to a user annotation (partitioner/propagation's provenance). Every
// instruction named in it is a link that selects that instruction.
#pragma once

#include <QPointer>
#include <QWidget>

class QTextBrowser;

namespace shardscope::views {

class Document;

class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit InspectorPanel(QWidget* parent = nullptr);
  void setDocument(Document* doc);
  // The HTML currently shown (for tests).
  QString html() const;
  QTextBrowser* browser() const { return browser_; }
  QSize sizeHint() const override { return QSize(460, 260); }

 public slots:
  void refresh();

 private:
  QPointer<Document> doc_;
  QTextBrowser* browser_;
};

}  // namespace shardscope::views
