// What lets a dock's content follow the dock's width instead of forcing a horizontal scroll bar:
// a layout that wraps its items onto further lines, a word-wrapped label that keeps its one-line
// width while there is room, break opportunities in long identifiers, and greedy line breaking
// for text a widget paints itself.
#pragma once

#include <QLabel>
#include <QLayout>
#include <QList>
#include <QMap>
#include <QStringList>

class QFontMetrics;

namespace shardscope::views {

// Lays its items out left to right, each at its preferred width, starting a new line when the
// next one does not fit (a word-wrapped item that is wider than a whole line gets the line's
// width and wraps). Items of a line are centred vertically. Height for width: the lines needed.
class FlowLayout : public QLayout {
 public:
  explicit FlowLayout(QWidget* parent = nullptr);
  ~FlowLayout() override;

  void addItem(QLayoutItem* item) override;
  int count() const override { return static_cast<int>(items_.size()); }
  QLayoutItem* itemAt(int index) const override;
  QLayoutItem* takeAt(int index) override;
  Qt::Orientations expandingDirections() const override { return {}; }
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;     // everything on one line
  QSize minimumSize() const override;  // the widest item's minimum
  void setGeometry(const QRect& rect) override;

 private:
  int horizontalGap() const;
  int verticalGap() const;
  // Places the items in `rect` (when `apply`); the height used.
  int arrange(const QRect& rect, bool apply) const;

  QList<QLayoutItem*> items_;
};

// A word-wrapped label whose preferred width is its text on one line: it wraps only when its
// layout gives it less (a plain word-wrapped QLabel prefers a narrow block of several lines).
// Its minimum is its longest unbreakable piece of text.
class WrapLabel : public QLabel {
 public:
  explicit WrapLabel(const QString& text = QString(), QWidget* parent = nullptr);
  // The preferred width is at least `width` (so labels of rows line up while there is room);
  // the minimum stays the longest unbreakable piece.
  void setPreferredWidthAtLeast(int width) {
    preferred_at_least_ = width;
    updateGeometry();
  }
  QSize sizeHint() const override;

 private:
  int preferred_at_least_ = 0;
  // The last hint and what it was computed from (layouts ask often; the text rarely changes).
  mutable QString hint_key_;
  mutable QSize hint_;
};

// A one-line plain-text label that shows its text elided with "…" when its layout gives it less
// width than the text needs (a status bar's summary and messages at 1024 px), the whole text in its
// tooltip. fullText() is the text as set; text() what is shown. With word wrap on (an error to
// read whole) it shows the whole text, wrapped.
class ElidingLabel : public QLabel {
 public:
  explicit ElidingLabel(QWidget* parent = nullptr);
  void setFullText(const QString& text);
  const QString& fullText() const { return full_; }
  QSize minimumSizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void elide();
  QString full_;
};

// A word-wrapped rich-text label for text with long tensor names: at widths where a name does
// not fit on a line it shows the text with the names breakable at their underscores
// (WithNameBreaks); otherwise the text as given (so it reads, and copies, unchanged). Its minimum
// width is the longest piece of the breakable text.
class NameWrapLabel : public QLabel {
 public:
  explicit NameWrapLabel(QWidget* parent = nullptr);
  // `html`: the text as given; underscores in it are where it may break.
  void setBreakableText(const QString& html);
  void clearText();
  QSize minimumSizeHint() const override;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  // The width of the longest unbreakable piece of `html` in this label's font.
  int longestPiece(const QString& html) const;
  void choose(int width);

  QString html_, broken_;
  int unbroken_min_ = 0, broken_min_ = 0;
};

// `escaped` (HTML-escaped text, e.g. a tensor name) with a zero-width break opportunity after
// every '_', so a word-wrapped label may break "backward_down0_conva_dconv_kernel" between its parts.
QString WithNameBreaks(const QString& escaped);

// `text` broken at its spaces into lines no wider than `width` (greedy); a word wider than the
// width gets a line of its own.
QStringList WrapToWidth(const QString& text, const QFontMetrics& fm, int width);

}  // namespace shardscope::views
