#include "views/narrow_layout.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <QFontMetrics>
#include <QStyle>
#include <QTextDocument>
#include <QWidget>

namespace shardscope::views {

// ---- FlowLayout -----------------------------------------------------------------------------------

FlowLayout::FlowLayout(QWidget* parent) : QLayout(parent) {}

FlowLayout::~FlowLayout() {
  while (QLayoutItem* item = takeAt(0)) delete item;
}

void FlowLayout::addItem(QLayoutItem* item) { items_.append(item); }

QLayoutItem* FlowLayout::itemAt(int index) const { return index >= 0 && index < items_.size() ? items_[index] : nullptr; }

QLayoutItem* FlowLayout::takeAt(int index) {
  if (index < 0 || index >= items_.size()) return nullptr;
  return items_.takeAt(index);
}

int FlowLayout::horizontalGap() const {
  const int s = spacing();
  if (s >= 0) return s;
  return parentWidget() ? parentWidget()->style()->pixelMetric(QStyle::PM_LayoutHorizontalSpacing, nullptr, parentWidget()) : 6;
}

int FlowLayout::verticalGap() const {
  const int s = spacing();
  if (s >= 0) return s;
  return parentWidget() ? parentWidget()->style()->pixelMetric(QStyle::PM_LayoutVerticalSpacing, nullptr, parentWidget()) : 6;
}

int FlowLayout::arrange(const QRect& rect, bool apply) const {
  const QMargins m = contentsMargins();
  const QRect r = rect.marginsRemoved(m);
  const int hgap = std::max(0, horizontalGap()), vgap = std::max(0, verticalGap());
  struct Placed {
    QLayoutItem* item;
    QRect geometry;
  };
  std::vector<Placed> line;
  int x = r.x(), y = r.y(), line_h = 0;
  bool any_line = false;
  auto flush = [&] {
    if (line.empty()) return;
    if (any_line) y += vgap;
    if (apply)
      for (Placed& p : line) p.item->setGeometry(p.geometry.translated(0, y + (line_h - p.geometry.height()) / 2));
    y += line_h;
    any_line = true;
    line.clear();
    line_h = 0;
    x = r.x();
  };
  for (QLayoutItem* item : items_) {
    if (item->isEmpty()) continue;  // hidden widgets, spacers
    const QSize hint = item->sizeHint(), min = item->minimumSize();
    const int w = std::max(min.width(), std::min(hint.width(), r.width()));
    if (!line.empty() && x + w > r.x() + r.width()) flush();
    const int h = item->hasHeightForWidth() ? item->heightForWidth(w) : hint.height();
    line.push_back({item, QRect(x, 0, w, std::max(h, min.height()))});
    line_h = std::max(line_h, line.back().geometry.height());
    x += w + hgap;
  }
  flush();
  return y - r.y() + m.top() + m.bottom();
}

int FlowLayout::heightForWidth(int width) const { return arrange(QRect(0, 0, width, 0), false); }

void FlowLayout::setGeometry(const QRect& rect) {
  QLayout::setGeometry(rect);
  arrange(rect, true);
}

QSize FlowLayout::sizeHint() const {
  const QMargins m = contentsMargins();
  int w = 0, h = 0, n = 0;
  for (QLayoutItem* item : items_) {
    if (item->isEmpty()) continue;
    const QSize s = item->sizeHint();
    w += s.width();
    h = std::max(h, s.height());
    ++n;
  }
  if (n > 1) w += (n - 1) * std::max(0, horizontalGap());
  return QSize(w + m.left() + m.right(), h + m.top() + m.bottom());
}

QSize FlowLayout::minimumSize() const {
  const QMargins m = contentsMargins();
  QSize s(0, 0);
  for (QLayoutItem* item : items_)
    if (!item->isEmpty()) s = s.expandedTo(item->minimumSize());
  return QSize(s.width() + m.left() + m.right(), s.height() + m.top() + m.bottom());
}

// ---- WrapLabel ------------------------------------------------------------------------------------

WrapLabel::WrapLabel(const QString& text, QWidget* parent) : QLabel(text, parent) {
  setWordWrap(true);  // also marks the size policy height-for-width
}

QSize WrapLabel::sizeHint() const {
  const QString key = QString("%1|%2|%3|%4|%5").arg(font().toString()).arg(preferred_at_least_).arg(minimumWidth()).arg(margin()).arg(text());
  if (key == hint_key_) return hint_;
  // The text's width on one line (as QLabel lays it out: no document margin), then the label's
  // frame, margin and indent; grown while the label would still break it (rounding).
  QTextDocument doc;
  doc.setDefaultFont(font());
  doc.setDocumentMargin(0);
  const bool rich = textFormat() == Qt::RichText || (textFormat() == Qt::AutoText && Qt::mightBeRichText(text()));
  if (rich) doc.setHtml(text());
  else doc.setPlainText(text());
  const QMargins cm = contentsMargins();
  const int extra = cm.left() + cm.right() + 2 * margin() + std::max(0, indent());
  int w = static_cast<int>(std::ceil(doc.idealWidth())) + extra;
  const int one_line = heightForWidth(QWIDGETSIZE_MAX / 4);
  for (int i = 0; i < 8 && heightForWidth(w) > one_line; ++i) w += 2;
  w = std::max({w, minimumWidth(), preferred_at_least_});
  hint_key_ = key;
  hint_ = QSize(w, heightForWidth(w));
  return hint_;
}

// ---- NameWrapLabel --------------------------------------------------------------------------------

ElidingLabel::ElidingLabel(QWidget* parent) : QLabel(parent) {
  setTextFormat(Qt::PlainText);
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
}

void ElidingLabel::setFullText(const QString& text) {
  full_ = text;
  setToolTip(text);
  elide();
}

QSize ElidingLabel::minimumSizeHint() const { return QSize(0, QLabel::minimumSizeHint().height()); }

void ElidingLabel::resizeEvent(QResizeEvent* event) {
  QLabel::resizeEvent(event);
  elide();
}

void ElidingLabel::elide() {
  const QString shown =
      wordWrap() ? full_ : fontMetrics().elidedText(full_, Qt::ElideRight, std::max(0, contentsRect().width()));
  if (text() != shown) setText(shown);
}

NameWrapLabel::NameWrapLabel(QWidget* parent) : QLabel(parent) {
  setTextFormat(Qt::RichText);
  setWordWrap(true);
}

int NameWrapLabel::longestPiece(const QString& html) const {
  QTextDocument doc;
  doc.setDefaultFont(font());
  doc.setDocumentMargin(0);
  doc.setHtml(html);
  doc.setTextWidth(0);  // every piece on a line of its own
  return static_cast<int>(std::ceil(doc.idealWidth()));
}

void NameWrapLabel::setBreakableText(const QString& html) {
  if (html == html_ && !text().isEmpty()) return;
  html_ = html;
  broken_ = WithNameBreaks(html);
  unbroken_min_ = longestPiece(html_);
  broken_min_ = longestPiece(broken_);
  setText(QString());  // chosen below for the current width
  choose(contentsRect().width());
}

void NameWrapLabel::clearText() {
  html_.clear();
  broken_.clear();
  unbroken_min_ = broken_min_ = 0;
  clear();
}

void NameWrapLabel::choose(int width) {
  const QString& want = unbroken_min_ + 2 * margin() <= width ? html_ : broken_;
  if (text() != want) setText(want);  // QLabel::setText updates the geometry
}

QSize NameWrapLabel::minimumSizeHint() const {
  QSize s = QLabel::minimumSizeHint();
  if (html_.isEmpty()) return s;
  const QMargins cm = contentsMargins();
  s.setWidth(broken_min_ + 2 * margin() + cm.left() + cm.right());
  return s;
}

void NameWrapLabel::resizeEvent(QResizeEvent* event) {
  QLabel::resizeEvent(event);
  if (!html_.isEmpty()) choose(contentsRect().width());
}

// ---- Text ------------------------------------------------------------------------------------------

QString WithNameBreaks(const QString& escaped) {
  QString out = escaped;
  out.replace(QChar('_'), QString("_") + QChar(0x200B));
  return out;
}

QStringList WrapToWidth(const QString& text, const QFontMetrics& fm, int width) {
  QStringList lines;
  QString line;
  for (const QString& word : text.split(' ')) {
    const QString candidate = line.isEmpty() ? word : line + ' ' + word;
    if (!line.isEmpty() && fm.horizontalAdvance(candidate) > width) {
      lines << line;
      line = word;
    } else {
      line = candidate;
    }
  }
  if (!line.isEmpty() || lines.isEmpty()) lines << line;
  return lines;
}

}  // namespace shardscope::views
