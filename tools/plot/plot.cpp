// Plot rendering: one drawing routine per figure type paints onto an abstract Canvas, which is
// either cairo (PNG) or a hand-written SVG builder (real <text> elements, embeddable in HTML).
// Text uses cairo's toy API with the fontconfig "sans-serif" face (DejaVu Sans on Debian): it
// covers the Latin, Greek and Cyrillic scripts our corpora use (de/fr/cs), so pango is not needed;
// glyphs the font lacks render as boxes rather than failing.
#include "tools/plot/plot.h"

#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numbers>
#include <string_view>

#include "core/error.h"
#include "core/fileio.h"

namespace seqgrad::plot {
namespace {

// ---------------------------------------------------------------------------------------------
// Colours

struct Rgb {
  double r = 0, g = 0, b = 0;
};

constexpr Rgb rgb_hex(unsigned hex) {
  return {((hex >> 16) & 0xff) / 255.0, ((hex >> 8) & 0xff) / 255.0, (hex & 0xff) / 255.0};
}

const Rgb kWhite = rgb_hex(0xffffff);
const Rgb kBlack = rgb_hex(0x000000);
const Rgb kTextColor = rgb_hex(0x222222);
const Rgb kTickColor = rgb_hex(0x333333);
const Rgb kGridColor = rgb_hex(0xe6e6e6);
const Rgb kFrameColor = rgb_hex(0x444444);

// matplotlib's viridis sampled at i/9; linear interpolation between these stays within a few
// ΔE of the full 256-entry table and keeps its perceptual uniformity.
const std::vector<Rgb>& viridis_anchors() {
  static const std::vector<Rgb> anchors = {rgb_hex(0x440154), rgb_hex(0x482878), rgb_hex(0x3e4989),
                                           rgb_hex(0x31688e), rgb_hex(0x26828e), rgb_hex(0x1f9e89),
                                           rgb_hex(0x35b779), rgb_hex(0x6ece58), rgb_hex(0xb5de2b),
                                           rgb_hex(0xfde725)};
  return anchors;
}

// ColorBrewer RdBu reversed: blue for negative, near-white at the centre, red for positive.
const std::vector<Rgb>& diverging_anchors() {
  static const std::vector<Rgb> anchors = {rgb_hex(0x053061), rgb_hex(0x2166ac), rgb_hex(0x4393c3),
                                           rgb_hex(0x92c5de), rgb_hex(0xd1e5f0), rgb_hex(0xf7f7f7),
                                           rgb_hex(0xfddbc7), rgb_hex(0xf4a582), rgb_hex(0xd6604d),
                                           rgb_hex(0xb2182b), rgb_hex(0x67001f)};
  return anchors;
}

// matplotlib's tab10: distinct, colour-blind-aware hues for series and bars.
Rgb palette_color(size_t index) {
  static const unsigned kTab10[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                    0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  return rgb_hex(kTab10[index % std::size(kTab10)]);
}

// t in [0, 1] (clamped) mapped through evenly spaced anchors.
Rgb sample_colormap(const std::vector<Rgb>& anchors, double t) {
  const double position = std::clamp(t, 0.0, 1.0) * static_cast<double>(anchors.size() - 1);
  const size_t lower = std::min(static_cast<size_t>(position), anchors.size() - 2);
  const double frac = position - static_cast<double>(lower);
  const Rgb& a = anchors[lower];
  const Rgb& b = anchors[lower + 1];
  return {a.r + (b.r - a.r) * frac, a.g + (b.g - a.g) * frac, a.b + (b.b - a.b) * frac};
}

double luminance(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

std::string hex_string(Rgb c) {
  auto channel = [](double v) {
    return static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255));
  };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(c.r), channel(c.g), channel(c.b));
}

// ---------------------------------------------------------------------------------------------
// Text: UTF-8 hygiene, measurement and placement

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when it is malformed.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char second_lo = 0x80, second_hi = 0xbf;  // ranges exclude overlongs and surrogates
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) second_lo = 0xa0;
    if (lead == 0xed) second_hi = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) second_lo = 0x90;
    if (lead == 0xf4) second_hi = 0x8f;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    const unsigned char lo = k == 1 ? second_lo : 0x80, hi = k == 1 ? second_hi : 0xbf;
    if (byte(i + k) < lo || byte(i + k) > hi) return 0;
  }
  return length;
}

// Cairo stops drawing after invalid UTF-8 and XML rejects control characters, so every string is
// repaired before use: malformed bytes become U+FFFD and control characters become spaces.
// Strings longer than max_chars code points are cut and end in an ellipsis.
std::string clean_text(std::string_view s, size_t max_chars = 200) {
  std::string out;
  std::vector<size_t> char_starts;  // byte offset in out of each code point
  for (size_t i = 0; i < s.size();) {
    char_starts.push_back(out.size());
    const size_t length = utf8_sequence_length(s, i);
    if (length == 0) {
      out += "\ufffd";
      i += 1;
    } else if (length == 1 && (static_cast<unsigned char>(s[i]) < 0x20 || s[i] == 0x7f)) {
      out += ' ';
      i += 1;
    } else {
      out.append(s.substr(i, length));
      i += length;
    }
  }
  if (char_starts.size() > max_chars) {
    out.resize(char_starts[max_chars - 1]);
    out += "\u2026";
  }
  return out;
}

// Tokens on axes are cut shorter than titles so one odd token cannot blow up the layout.
constexpr size_t kMaxLabelChars = 24;
constexpr size_t kMaxTitleChars = 120;

enum class HAlign { left, center, right };
enum class VAlign { baseline, top, middle, bottom };

struct Font {
  double size = 11;
  bool bold = false;
};

struct TextStyle {
  Font font;
  Rgb color = kTextColor;
  HAlign h_align = HAlign::left;
  VAlign v_align = VAlign::baseline;
  double angle_deg = 0;  // counter-clockwise as seen on screen, like matplotlib's rotation
};

const Font kTitleFont{14, true};
const Font kAxisLabelFont{12, false};
const Font kTickFont{11, false};

struct FontMetrics {
  double ascent = 0, descent = 0;
  double line_height() const { return ascent + descent; }
};

void select_font(cairo_t* cr, Font font) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         font.bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, font.size);
}

// Unhinted metrics: layout measured at scale 1 must match text drawn at kPngScale and in SVG.
void disable_metric_hinting(cairo_t* cr) {
  cairo_font_options_t* options = cairo_font_options_create();
  cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF);
  cairo_set_font_options(cr, options);
  cairo_font_options_destroy(options);
}

// Measures text with a scratch cairo context (one per thread; cairo contexts are not shared).
class TextMeter {
 public:
  static TextMeter& instance() {
    thread_local TextMeter meter;
    return meter;
  }
  double width(std::string_view text, Font font) {
    select_font(cr_.get(), font);
    const std::string clean = clean_text(text);
    cairo_text_extents_t extents;
    cairo_text_extents(cr_.get(), clean.c_str(), &extents);
    return extents.x_advance;
  }
  FontMetrics metrics(Font font) {
    select_font(cr_.get(), font);
    cairo_font_extents_t extents;
    cairo_font_extents(cr_.get(), &extents);
    return {extents.ascent, extents.descent};
  }

 private:
  TextMeter()
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1), cairo_surface_destroy),
        cr_(cairo_create(surface_.get()), cairo_destroy) {
    disable_metric_hinting(cr_.get());
  }
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface_;
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr_;
};

double text_width(std::string_view text, Font font) {
  return TextMeter::instance().width(text, font);
}
FontMetrics font_metrics(Font font) { return TextMeter::instance().metrics(font); }

struct Point {
  double x = 0, y = 0;
};

struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  double right() const { return x + w; }
  double bottom() const { return y + h; }
  bool contains(Point p) const { return p.x >= x && p.x <= right() && p.y >= y && p.y <= bottom(); }
};

// Where the text starts and where its baseline lies, in the text's own (rotated) frame whose
// origin is the anchor point.
struct TextOrigin {
  double x = 0, baseline = 0, width = 0;
  FontMetrics metrics;
};

TextOrigin text_origin(std::string_view text, const TextStyle& style) {
  TextOrigin origin;
  origin.width = text_width(text, style.font);
  origin.metrics = font_metrics(style.font);
  const double alignment = style.h_align == HAlign::left     ? 0.0
                           : style.h_align == HAlign::center ? 0.5
                                                             : 1.0;
  origin.x = -origin.width * alignment;
  switch (style.v_align) {
    case VAlign::baseline: origin.baseline = 0; break;
    case VAlign::top: origin.baseline = origin.metrics.ascent; break;
    case VAlign::middle:
      origin.baseline = (origin.metrics.ascent - origin.metrics.descent) / 2;
      break;
    case VAlign::bottom: origin.baseline = -origin.metrics.descent; break;
  }
  return origin;
}

// Axis-aligned bounding box on screen of text drawn at anchor with the given style.
Rect text_bounds(std::string_view text, Point anchor, const TextStyle& style) {
  const TextOrigin o = text_origin(text, style);
  const double angle = style.angle_deg * std::numbers::pi / 180.0;
  const double c = std::cos(angle), s = std::sin(angle);
  const double top = o.baseline - o.metrics.ascent, bottom = o.baseline + o.metrics.descent;
  const Point corners[] = {
      {o.x, top}, {o.x + o.width, top}, {o.x, bottom}, {o.x + o.width, bottom}};
  double min_x = 1e300, min_y = 1e300, max_x = -1e300, max_y = -1e300;
  for (const Point& p : corners) {
    const double x = anchor.x + p.x * c + p.y * s, y = anchor.y - p.x * s + p.y * c;
    min_x = std::min(min_x, x), max_x = std::max(max_x, x);
    min_y = std::min(min_y, y), max_y = std::max(max_y, y);
  }
  return {min_x, min_y, max_x - min_x, max_y - min_y};
}

// ---------------------------------------------------------------------------------------------
// Canvas: the few drawing primitives the figures need, in SVG user units.

class Canvas {
 public:
  virtual ~Canvas() = default;
  virtual void fill_rect(const Rect& rect, Rgb color) = 0;
  virtual void stroke_rect(const Rect& rect, Rgb color, double line_width) = 0;
  virtual void polyline(const std::vector<Point>& points, Rgb color, double line_width) = 0;
  virtual void dot(Point centre, double radius, Rgb color) = 0;
  // Fills rect with the colormap given by evenly spaced anchors, first anchor at the bottom.
  virtual void vertical_gradient(const Rect& rect, const std::vector<Rgb>& anchors) = 0;
  virtual void text(std::string_view text, Point anchor, const TextStyle& style) = 0;
  // Text shown when the pointer rests on rect: SVG only (a PNG has no pointer).
  virtual void tooltip(const Rect&, std::string_view) {}
  void line(Point from, Point to, Rgb color, double line_width) {
    polyline({from, to}, color, line_width);
  }
};

class CairoCanvas final : public Canvas {
 public:
  explicit CairoCanvas(cairo_t* cr) : cr_(cr) {}

  void fill_rect(const Rect& rect, Rgb color) override {
    set_color(color);
    cairo_rectangle(cr_, rect.x, rect.y, rect.w, rect.h);
    cairo_fill(cr_);
  }
  void stroke_rect(const Rect& rect, Rgb color, double line_width) override {
    set_color(color);
    cairo_set_line_width(cr_, line_width);
    cairo_rectangle(cr_, rect.x, rect.y, rect.w, rect.h);
    cairo_stroke(cr_);
  }
  void polyline(const std::vector<Point>& points, Rgb color, double line_width) override {
    if (points.size() < 2) return;
    set_color(color);
    cairo_set_line_width(cr_, line_width);
    cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
    cairo_move_to(cr_, points[0].x, points[0].y);
    for (size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].x, points[i].y);
    cairo_stroke(cr_);
  }
  void dot(Point centre, double radius, Rgb color) override {
    set_color(color);
    cairo_new_sub_path(cr_);
    cairo_arc(cr_, centre.x, centre.y, radius, 0, 2 * std::numbers::pi);
    cairo_fill(cr_);
  }
  void vertical_gradient(const Rect& rect, const std::vector<Rgb>& anchors) override {
    cairo_pattern_t* gradient = cairo_pattern_create_linear(0, rect.bottom(), 0, rect.y);
    for (size_t i = 0; i < anchors.size(); ++i) {
      const double offset = static_cast<double>(i) / static_cast<double>(anchors.size() - 1);
      cairo_pattern_add_color_stop_rgb(gradient, offset, anchors[i].r, anchors[i].g, anchors[i].b);
    }
    cairo_set_source(cr_, gradient);
    cairo_rectangle(cr_, rect.x, rect.y, rect.w, rect.h);
    cairo_fill(cr_);
    cairo_pattern_destroy(gradient);
  }
  void text(std::string_view text, Point anchor, const TextStyle& style) override {
    const std::string clean = clean_text(text);
    const TextOrigin origin = text_origin(clean, style);
    cairo_save(cr_);
    cairo_translate(cr_, anchor.x, anchor.y);
    cairo_rotate(cr_, -style.angle_deg * std::numbers::pi / 180.0);  // cairo's y axis points down
    select_font(cr_, style.font);
    set_color(style.color);
    cairo_move_to(cr_, origin.x, origin.baseline);
    cairo_show_text(cr_, clean.c_str());
    cairo_restore(cr_);
  }

 private:
  void set_color(Rgb c) { cairo_set_source_rgb(cr_, c.r, c.g, c.b); }
  cairo_t* cr_;
};

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

// Compact coordinates: two decimals at most, no trailing zeros.
std::string num(double v) {
  if (std::abs(v) < 0.005) return "0";
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// Ids must be unique across every SVG inlined into one HTML page, hence a process-wide counter.
std::string next_svg_id(std::string_view prefix) {
  static std::atomic<unsigned> counter{0};
  return fmt::format("sg-{}-{}", prefix, counter.fetch_add(1));
}

class SvgCanvas final : public Canvas {
 public:
  void fill_rect(const Rect& rect, Rgb color) override {
    body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                         num(rect.x), num(rect.y), num(rect.w), num(rect.h), hex_string(color));
  }
  void stroke_rect(const Rect& rect, Rgb color, double line_width) override {
    body_ += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"{}\"/>\n",
        num(rect.x), num(rect.y), num(rect.w), num(rect.h), hex_string(color), num(line_width));
  }
  void polyline(const std::vector<Point>& points, Rgb color, double line_width) override {
    if (points.size() < 2) return;
    std::string coords;
    for (const Point& p : points) coords += fmt::format("{},{} ", num(p.x), num(p.y));
    coords.pop_back();
    body_ += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
        "stroke-linejoin=\"round\"/>\n",
        coords, hex_string(color), num(line_width));
  }
  void dot(Point centre, double radius, Rgb color) override {
    body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"/>\n", num(centre.x),
                         num(centre.y), num(radius), hex_string(color));
  }
  void vertical_gradient(const Rect& rect, const std::vector<Rgb>& anchors) override {
    const std::string id = next_svg_id("gradient");
    defs_ += fmt::format("<linearGradient id=\"{}\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n", id);
    for (size_t i = 0; i < anchors.size(); ++i) {
      const double offset = static_cast<double>(i) / static_cast<double>(anchors.size() - 1);
      defs_ += fmt::format("<stop offset=\"{:.4f}\" stop-color=\"{}\"/>\n", offset,
                           hex_string(anchors[i]));
    }
    defs_ += "</linearGradient>\n";
    body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#{})\"/>\n",
                         num(rect.x), num(rect.y), num(rect.w), num(rect.h), id);
  }
  // text-anchor does the horizontal alignment, so viewers with other fonts still align correctly.
  void text(std::string_view text, Point anchor, const TextStyle& style) override {
    const TextOrigin origin = text_origin(text, style);
    const char* anchor_name = style.h_align == HAlign::left     ? "start"
                              : style.h_align == HAlign::center ? "middle"
                                                                : "end";
    const std::string placement =
        style.angle_deg == 0
            ? fmt::format("x=\"{}\" y=\"{}\"", num(anchor.x), num(anchor.y + origin.baseline))
            : fmt::format("transform=\"translate({} {}) rotate({})\" y=\"{}\"", num(anchor.x),
                          num(anchor.y), num(-style.angle_deg), num(origin.baseline));
    body_ +=
        fmt::format("<text {} font-size=\"{}\"{} fill=\"{}\" text-anchor=\"{}\">{}</text>\n",
                    placement, num(style.font.size), style.font.bold ? " font-weight=\"bold\"" : "",
                    hex_string(style.color), anchor_name, xml_escape(clean_text(text)));
  }

  void tooltip(const Rect& rect, std::string_view text) override {
    body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                         "pointer-events=\"all\"><title>{}</title></rect>\n",
                         num(rect.x), num(rect.y), num(rect.w), num(rect.h), xml_escape(clean_text(text)));
  }

  std::string document(int width, int height, std::string_view title) const {
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
        "{1}\" "
        "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\">\n",
        width, height);
    if (!title.empty()) svg += fmt::format("<title>{}</title>\n", xml_escape(clean_text(title)));
    if (!defs_.empty()) svg += "<defs>\n" + defs_ + "</defs>\n";
    svg += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", width, height);
    return svg + body_ + "</svg>\n";
  }

 private:
  std::string body_, defs_;
};

// ---------------------------------------------------------------------------------------------
// Figures and output

struct Figure {
  int width = 0, height = 0;
  std::string title;
  std::function<void(Canvas&)> draw;
};

std::string render_svg(const Figure& figure) {
  SvgCanvas canvas;
  figure.draw(canvas);
  return canvas.document(figure.width, figure.height, figure.title);
}

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

std::string render_png(const Figure& figure, std::string_view function) {
  const int width = static_cast<int>(std::lround(figure.width * kPngScale));
  const int height = static_cast<int>(std::lround(figure.height * kPngScale));
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height), cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()), cairo_destroy);
  SG_CHECK_IO(cairo_status(cr.get()) == CAIRO_STATUS_SUCCESS, "{}: cannot create a {}x{} image: {}",
              function, width, height, cairo_status_to_string(cairo_status(cr.get())));
  cairo_scale(cr.get(), kPngScale, kPngScale);
  disable_metric_hinting(cr.get());
  CairoCanvas canvas(cr.get());
  canvas.fill_rect({0, 0, double(figure.width), double(figure.height)}, kWhite);
  figure.draw(canvas);
  SG_CHECK_IO(cairo_status(cr.get()) == CAIRO_STATUS_SUCCESS, "{}: drawing failed: {}", function,
              cairo_status_to_string(cairo_status(cr.get())));
  std::string png;
  const cairo_status_t status =
      cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png);
  SG_CHECK_IO(status == CAIRO_STATUS_SUCCESS, "{}: PNG encoding failed: {}", function,
              cairo_status_to_string(status));
  return png;
}

// core/fileio's temporary file and rename (readers never see a half-written file), its errors
// (with the system's reason: "No space left on device") prefixed with the plotting function.
void write_file_atomically(const std::string& path, std::string_view bytes,
                           std::string_view function) {
  SG_CHECK_IO(!path.empty(), "{}: output path is empty", function);
  try {
    write_file_atomic(path, bytes);
  } catch (const IOError& e) {
    throw IOError(fmt::format("{}: {}", function, e.what()));
  }
}

// ---------------------------------------------------------------------------------------------
// Axes: value ranges, nice ticks and tick labels

// The 1-2-5 step closest to raw_step.
double nice_step(double raw_step) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  const double fraction = raw_step / magnitude;
  const double nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  return nice * magnitude;
}

// A linear or log10 axis; lo, hi and ticks are positions (log10 of the value on a log axis).
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;
  double fraction(double position) const { return (position - lo) / (hi - lo); }
};

std::vector<double> linear_ticks(double lo, double hi, double step) {
  std::vector<double> ticks;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int k = 0; k < 100; ++k) {
    double tick = first + k * step;
    if (tick > hi + step * 1e-9) break;
    if (std::abs(tick) < step * 1e-9) tick = 0;  // no "-0.0"
    ticks.push_back(tick);
  }
  return ticks;
}

// Typographic minus sign, as matplotlib prints negative numbers.
// A typographic minus; a value that rounds to zero ("-0.00") loses its sign.
std::string with_minus_sign(std::string number) {
  if (number.empty() || number[0] != '-') return number;
  if (std::none_of(number.begin() + 1, number.end(), [](char c) { return c >= '1' && c <= '9'; }))
    return number.substr(1);
  return number.replace(0, 1, "\u2212");
}

std::string superscript(int exponent) {
  static const char* kDigits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string digits = std::to_string(std::abs(exponent)), out = exponent < 0 ? "⁻" : "";
  for (char d : digits) out += kDigits[d - '0'];
  return out;
}

// "5×10⁻⁷": mantissa with at most two significant digits.
std::string scientific_label(double v) {
  if (v == 0) return "0";
  int exponent = static_cast<int>(std::floor(std::log10(std::abs(v))));
  double mantissa = std::round(v / std::pow(10.0, exponent) * 10) / 10;
  if (std::abs(mantissa) >= 10) mantissa /= 10, exponent += 1;
  const std::string power = "10" + superscript(exponent);
  return with_minus_sign(std::abs(mantissa) == 1 ? (mantissa < 0 ? "-" : "") + power
                                                 : fmt::format("{:g}\u00d7{}", mantissa, power));
}

// One consistent format per axis: thousands as "20k", values below 0.001 in scientific notation,
// otherwise as many decimals as the step needs.
std::vector<std::string> linear_tick_labels(const std::vector<double>& ticks, double step) {
  double largest = 0;
  for (double t : ticks) largest = std::max(largest, std::abs(t));
  double divisor = 1;
  const char* suffix = "";
  if (largest >= 1e7 && step >= 1e6)
    divisor = 1e6, suffix = "M";
  else if (largest >= 1e4 && step >= 1e3)
    divisor = 1e3, suffix = "k";
  const bool scientific = largest < 1e-3;
  const int decimals =
      std::clamp(static_cast<int>(-std::floor(std::log10(step / divisor) + 1e-9)), 0, 9);
  std::vector<std::string> labels;
  for (double t : ticks) {
    labels.push_back(scientific ? scientific_label(t)
                                : with_minus_sign(fmt::format("{:.{}f}{}", t / divisor, decimals,
                                                              t == 0 ? "" : suffix)));
  }
  return labels;
}

// Range [lo, hi] padded by pad_fraction on each side; a single value gets a symmetric range.
std::pair<double, double> padded_range(double lo, double hi, double pad_fraction) {
  // Differences below a millionth of the value are float noise, not a trend worth a whole axis.
  if (hi - lo <= std::max(std::abs(lo), std::abs(hi)) * 1e-6) {
    const double half = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    return {lo - half, hi + half};
  }
  const double pad = (hi - lo) * pad_fraction;
  return {lo - pad, hi + pad};
}

// About five ticks at a nice step, at least min_step apart (1: whole numbers only).
Axis make_linear_axis(double lo, double hi, double min_step = 0) {
  Axis axis{lo, hi, {}, {}};
  const double step = std::max(min_step, nice_step((hi - lo) / 5));
  axis.ticks = linear_ticks(lo, hi, step);
  axis.labels = linear_tick_labels(axis.ticks, step);
  return axis;
}

// Decade labels: plain numbers when all fit in 0.001 .. 10000, otherwise all as 10ⁿ.
std::vector<std::string> decade_labels(const std::vector<int>& exponents) {
  const bool plain =
      std::all_of(exponents.begin(), exponents.end(), [](int e) { return e >= -3 && e <= 4; });
  std::vector<std::string> labels;
  for (int e : exponents)
    labels.push_back(plain ? fmt::format("{:g}", std::pow(10.0, e)) : "10" + superscript(e));
  return labels;
}

// lo, hi are log10 positions. Decades when the range spans several, else the sparsest set of
// mantissas per decade that gives at least four ticks, else linear ticks placed on the log scale.
Axis make_log_axis(double lo, double hi) {
  Axis axis{lo, hi, {}, {}};
  if (hi - lo >= 2) {
    const int stride = std::max(1, static_cast<int>(std::ceil((hi - lo) / 8)));
    std::vector<int> exponents;
    for (int e = static_cast<int>(std::ceil(lo)); e <= std::floor(hi); e += stride)
      exponents.push_back(e);
    axis.ticks.assign(exponents.begin(), exponents.end());
    axis.labels = decade_labels(exponents);
    return axis;
  }
  const std::vector<std::vector<double>> mantissa_sets = {
      {1, 2, 5}, {1, 2, 3, 5, 7}, {1, 1.5, 2, 3, 4, 5, 6, 7, 8}};
  for (const std::vector<double>& mantissas : mantissa_sets) {
    axis.ticks.clear(), axis.labels.clear();
    for (int e = static_cast<int>(std::floor(lo)); e <= std::ceil(hi); ++e) {
      for (double mantissa : mantissas) {
        const double position = e + std::log10(mantissa);
        if (position < lo - 1e-9 || position > hi + 1e-9) continue;
        axis.ticks.push_back(position);
        axis.labels.push_back(fmt::format("{:g}", mantissa * std::pow(10.0, e)));
      }
    }
    if (axis.ticks.size() >= 4) return axis;
  }
  const double value_lo = std::pow(10.0, lo), value_hi = std::pow(10.0, hi);
  const double step = nice_step((value_hi - value_lo) / 4);
  const std::vector<double> values = linear_ticks(value_lo, value_hi, step);
  axis.labels = linear_tick_labels(values, step);
  axis.ticks.clear();
  for (double v : values) axis.ticks.push_back(std::log10(v));
  return axis;
}

double max_width(const std::vector<std::string>& texts, Font font) {
  double widest = 0;
  for (const std::string& t : texts) widest = std::max(widest, text_width(t, font));
  return widest;
}

std::string title_text(std::string_view title) { return clean_text(title, kMaxTitleChars); }

// Drops code points from the end until the text plus an ellipsis fits max_width.
std::string fit_text(const std::string& text, Font font, double max_width) {
  if (text_width(text, font) <= max_width) return text;
  std::string cut = text;
  while (!cut.empty()) {
    size_t last = cut.size() - 1;
    while (last > 0 && (static_cast<unsigned char>(cut[last]) & 0xc0) == 0x80)
      --last;  // continuation bytes
    cut.resize(last);
    if (text_width(cut + "\u2026", font) <= max_width) break;
  }
  return cut + "\u2026";
}

// ---------------------------------------------------------------------------------------------
// Heatmap

constexpr int kMaxTokens = 400;  // 400x400 cells already make a 2400-unit figure
constexpr int kMaxAnnotatedTokens = 15;
constexpr double kPadding = 12;
constexpr double kTickLength = 4;

void validate_heatmap(const Heatmap& h, std::string_view function) {
  SG_CHECK_VALUE(h.rows > 0 && h.cols > 0, "{}: empty matrix (rows {}, cols {})", function, h.rows,
                 h.cols);
  SG_CHECK_VALUE(h.rows <= kMaxTokens && h.cols <= kMaxTokens,
                 "{}: matrix {}x{} too large to plot (at most {} rows and columns)", function,
                 h.rows, h.cols, kMaxTokens);
  const size_t expected = static_cast<size_t>(h.rows) * static_cast<size_t>(h.cols);
  SG_CHECK_VALUE(h.values.size() == expected,
                 "{}: rows * cols = {} * {} = {} but values has {} elements", function, h.rows,
                 h.cols, expected, h.values.size());
  SG_CHECK_VALUE(h.row_labels.empty() || h.row_labels.size() == static_cast<size_t>(h.rows),
                 "{}: {} row_labels for {} rows", function, h.row_labels.size(), h.rows);
  SG_CHECK_VALUE(h.col_labels.empty() || h.col_labels.size() == static_cast<size_t>(h.cols),
                 "{}: {} col_labels for {} cols", function, h.col_labels.size(), h.cols);
  for (size_t i = 0; i < h.values.size(); ++i) {
    SG_CHECK_VALUE(std::isfinite(h.values[i]),
                   "{}: values[{}] (row {}, col {}) is {} in a {}x{} matrix", function, i,
                   i / static_cast<size_t>(h.cols), i % static_cast<size_t>(h.cols), h.values[i],
                   h.rows, h.cols);
  }
}

std::vector<std::string> axis_labels(const std::vector<std::string>& given, int count) {
  std::vector<std::string> labels;
  for (int i = 0; i < count; ++i) {
    labels.push_back(given.empty() ? std::to_string(i) : clean_text(given[i], kMaxLabelChars));
  }
  return labels;
}

// Maps a value to a colour: viridis over [lo, hi], or the diverging map symmetric around 0.
struct ColorScale {
  double lo = 0, hi = 1;
  bool diverging = false;
  const std::vector<Rgb>& anchors() const {
    return diverging ? diverging_anchors() : viridis_anchors();
  }
  Rgb color(double v) const { return sample_colormap(anchors(), (v - lo) / (hi - lo)); }
};

ColorScale heatmap_color_scale(const Heatmap& h) {
  const auto [min_it, max_it] = std::minmax_element(h.values.begin(), h.values.end());
  const double min_value = *min_it, max_value = *max_it;
  if (h.diverging) {
    const double extent = std::max(std::abs(min_value), std::abs(max_value));
    return {extent > 0 ? -extent : -1, extent > 0 ? extent : 1, true};
  }
  const double lo = std::min(0.0, min_value);
  double hi = h.scale_to_max ? max_value : std::max(1.0, max_value);
  if (hi <= lo) hi = lo + 1;
  return {lo, hi, false};
}

// Every position of the heatmap figure, computed once and shared by the PNG and SVG renderers.
struct HeatmapLayout {
  std::vector<float> values;
  int rows = 0, cols = 0, cell = 0;
  std::vector<std::string> row_labels, col_labels;
  std::string title, colorbar_label, x_title, y_title;
  std::vector<std::string> title_lines;  // the title wrapped to the figure's width
  Point x_title_anchor, y_title_anchor;
  ColorScale scale;
  Font label_font;
  bool show_labels = true;
  double col_label_angle = 45;
  Rect matrix, colorbar;
  Axis colorbar_axis;
  Point title_anchor, colorbar_label_anchor;
  int width = 0, height = 0;
  // Cell values are written only when they fit; font size 0 means no annotation.
  Font value_font{0, false};
  int value_decimals = 2;
};

int heatmap_cell_size(int rows, int cols) {
  const int tokens = std::max(rows, cols);
  int cell = std::clamp(640 / tokens, 12, 44);
  if (cell * tokens > 2400) cell = std::max(2, 2400 / tokens);  // keep huge matrices a sane size
  return cell;
}

std::string format_value(double v, int decimals) {
  return with_minus_sign(fmt::format("{:.{}f}", v, decimals));
}

// Largest font <= 11 at which every value fits inside a cell, or 0 when annotation is off.
void choose_value_font(const Heatmap& h, HeatmapLayout& layout) {
  if (!h.show_values || h.rows > kMaxAnnotatedTokens || h.cols > kMaxAnnotatedTokens) return;
  const double extent = std::max(std::abs(layout.scale.lo), std::abs(layout.scale.hi));
  layout.value_decimals = extent >= 100 ? 0 : extent >= 10 ? 1 : 2;
  double widest = 0;
  for (float v : h.values)
    widest = std::max(widest, text_width(format_value(v, layout.value_decimals), Font{11, false}));
  const double size = std::min(11.0, 11.0 * 0.84 * layout.cell / widest);
  if (size >= 7) layout.value_font = {size, false};
}

struct Extents {
  double left = 0, top = 0, right = 0;  // how far the labels reach past the matrix
};

// Column labels sit above the matrix at 45 degrees, or vertical when columns are too narrow.
TextStyle col_label_style(const HeatmapLayout& layout) {
  return {layout.label_font, kTextColor, HAlign::left, VAlign::middle, layout.col_label_angle};
}
TextStyle row_label_style(const HeatmapLayout& layout) {
  return {layout.label_font, kTextColor, HAlign::right, VAlign::middle, 0};
}
Point col_label_anchor(const HeatmapLayout& layout, int col) {
  return {layout.matrix.x + (col + 0.5) * layout.cell, layout.matrix.y - kTickLength - 3};
}
Point row_label_anchor(const HeatmapLayout& layout, int row) {
  return {layout.matrix.x - kTickLength - 3, layout.matrix.y + (row + 0.5) * layout.cell};
}

// Extents of the tick labels, measured with the matrix at the origin.
Extents label_extents(const HeatmapLayout& layout) {
  Extents extents;
  if (!layout.show_labels) return extents;
  for (int c = 0; c < layout.cols; ++c) {
    const Rect box =
        text_bounds(layout.col_labels[c], col_label_anchor(layout, c), col_label_style(layout));
    extents.top = std::max(extents.top, -box.y);
    extents.right = std::max(extents.right, box.right() - layout.matrix.w);
  }
  for (int r = 0; r < layout.rows; ++r) {
    const Rect box =
        text_bounds(layout.row_labels[r], row_label_anchor(layout, r), row_label_style(layout));
    extents.left = std::max(extents.left, -box.x);
  }
  return extents;
}

TextStyle colorbar_tick_style() { return {kTickFont, kTickColor, HAlign::left, VAlign::middle, 0}; }
TextStyle colorbar_label_style() {
  return {kAxisLabelFont, kTextColor, HAlign::center, VAlign::top, 90};
}

// Positions the colour bar right of the matrix (matrix at the origin); returns its right edge.
double place_colorbar(HeatmapLayout& layout) {
  const double height = std::clamp(layout.matrix.h, 120.0, 480.0);
  const double top = std::max(0.0, (layout.matrix.h - height) / 2);
  layout.colorbar = {layout.matrix.w + 18, top, 14, height};
  layout.colorbar_axis = make_linear_axis(layout.scale.lo, layout.scale.hi);
  const double labels_right =
      layout.colorbar.right() + kTickLength + 3 + max_width(layout.colorbar_axis.labels, kTickFont);
  if (layout.colorbar_label.empty()) return labels_right;
  layout.colorbar_label_anchor = {labels_right + 8, top + height / 2};
  return labels_right + 8 + font_metrics(kAxisLabelFont).line_height();
}

// Moves every element by (dx, dy): layout is computed with the matrix at the origin first.
void shift_layout(HeatmapLayout& layout, double dx, double dy) {
  for (Rect* r : {&layout.matrix, &layout.colorbar}) r->x += dx, r->y += dy;
  layout.colorbar_label_anchor.x += dx, layout.colorbar_label_anchor.y += dy;
}

// Greedy word wrap of text into lines at most `width` wide (a longer single word gets its own
// line); after kMaxTitleLines the rest is cut with an ellipsis.
constexpr size_t kMaxTitleLines = 4;
std::vector<std::string> wrap_words(const std::string& text, const Font& font, double width) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && text_width(line + " " + word, font) > width) lines.push_back(line), line.clear();
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  if (lines.size() > kMaxTitleLines) {
    lines.resize(kMaxTitleLines);
    lines.back() += " \u2026";
  }
  return lines;
}

HeatmapLayout layout_heatmap(const Heatmap& h, std::string_view function) {
  validate_heatmap(h, function);
  HeatmapLayout layout;
  layout.values = h.values;
  layout.rows = h.rows, layout.cols = h.cols;
  layout.cell = heatmap_cell_size(h.rows, h.cols);
  layout.row_labels = axis_labels(h.row_labels, h.rows);
  layout.col_labels = axis_labels(h.col_labels, h.cols);
  layout.title = clean_text(h.title, kMaxTitleLines * kMaxTitleChars);  // wrapped below, not cut
  layout.colorbar_label = clean_text(h.colorbar_label, kMaxLabelChars);
  layout.x_title = clean_text(h.x_title, kMaxLabelChars);
  layout.y_title = clean_text(h.y_title, kMaxLabelChars);
  layout.scale = heatmap_color_scale(h);
  layout.label_font = {std::clamp(layout.cell * 0.7, 7.0, 12.0), false};
  layout.show_labels = layout.cell >= 7;
  layout.col_label_angle =
      layout.cell >= 1.5 * font_metrics(layout.label_font).line_height() ? 45 : 90;
  layout.matrix = {0, 0, double(h.cols * layout.cell), double(h.rows * layout.cell)};
  choose_value_font(h, layout);

  Extents labels = label_extents(layout);
  const double axis_title_space = font_metrics(kAxisLabelFont).line_height() + 6;
  const double tick_labels_left = labels.left;
  if (!layout.y_title.empty()) labels.left += axis_title_space;
  const double content_right = std::max(place_colorbar(layout), layout.matrix.w + labels.right);
  const double content_bottom = std::max(layout.matrix.h + (layout.x_title.empty() ? 0 : axis_title_space),
                                         layout.colorbar.bottom() + 6);
  const double content_width = labels.left + content_right;
  layout.title_lines = wrap_words(layout.title, kTitleFont, std::max(content_width, 520.0));
  const double title_height =
      layout.title_lines.empty() ? 0 : layout.title_lines.size() * font_metrics(kTitleFont).line_height() + 10;
  double title_width = 0;
  for (const std::string& line : layout.title_lines) title_width = std::max(title_width, text_width(line, kTitleFont));
  const double width = std::max(content_width, title_width) + 2 * kPadding;
  // Centre the title over the matrix unless that would push it off the figure.
  const double dx =
      std::ceil(kPadding + labels.left + std::max(0.0, (title_width - content_width) / 2));
  const double dy = std::ceil(kPadding + title_height + std::max(labels.top, 6.0));
  shift_layout(layout, dx, dy);
  const double title_x = std::clamp(layout.matrix.x + layout.matrix.w / 2,
                                    kPadding + title_width / 2, width - kPadding - title_width / 2);
  layout.title_anchor = {title_x, kPadding};
  layout.x_title_anchor = {layout.matrix.x + layout.matrix.w / 2, layout.matrix.bottom() + 6};
  layout.y_title_anchor = {layout.matrix.x - tick_labels_left - axis_title_space,
                           layout.matrix.y + layout.matrix.h / 2};
  layout.width = static_cast<int>(std::ceil(width));
  layout.height = static_cast<int>(std::ceil(dy + content_bottom + kPadding));
  return layout;
}

void draw_heatmap_cells(Canvas& canvas, const HeatmapLayout& layout) {
  for (int r = 0; r < layout.rows; ++r) {
    for (int c = 0; c < layout.cols; ++c) {
      const Rect cell{layout.matrix.x + c * layout.cell, layout.matrix.y + r * layout.cell,
                      double(layout.cell), double(layout.cell)};
      canvas.fill_rect(cell, layout.scale.color(layout.values[r * layout.cols + c]));
    }
  }
}

// Too large a matrix for printed values: each SVG cell tells its tokens and value on hover.
void draw_heatmap_tooltips(Canvas& canvas, const HeatmapLayout& layout) {
  auto label = [](const std::vector<std::string>& labels, int i) {
    return i < static_cast<int>(labels.size()) && !labels[i].empty() ? labels[i] : std::to_string(i + 1);
  };
  for (int r = 0; r < layout.rows; ++r) {
    for (int c = 0; c < layout.cols; ++c) {
      const Rect cell{layout.matrix.x + c * layout.cell, layout.matrix.y + r * layout.cell,
                      double(layout.cell), double(layout.cell)};
      canvas.tooltip(cell, fmt::format("{} \u2192 {}: {}", label(layout.row_labels, r), label(layout.col_labels, c),
                                       format_value(layout.values[r * layout.cols + c], 3)));
    }
  }
}

void draw_heatmap_values(Canvas& canvas, const HeatmapLayout& layout) {
  if (layout.value_font.size == 0) return draw_heatmap_tooltips(canvas, layout);
  for (int r = 0; r < layout.rows; ++r) {
    for (int c = 0; c < layout.cols; ++c) {
      const double v = layout.values[r * layout.cols + c];
      const Rgb ink = luminance(layout.scale.color(v)) > 0.45 ? kBlack : kWhite;
      const Point centre{layout.matrix.x + (c + 0.5) * layout.cell,
                         layout.matrix.y + (r + 0.5) * layout.cell};
      canvas.text(format_value(v, layout.value_decimals), centre,
                  {layout.value_font, ink, HAlign::center, VAlign::middle, 0});
    }
  }
}

void draw_heatmap_labels(Canvas& canvas, const HeatmapLayout& layout) {
  if (!layout.show_labels) return;
  for (int c = 0; c < layout.cols; ++c) {
    const double x = layout.matrix.x + (c + 0.5) * layout.cell;
    canvas.line({x, layout.matrix.y}, {x, layout.matrix.y - kTickLength}, kFrameColor, 0.8);
    canvas.text(layout.col_labels[c], col_label_anchor(layout, c), col_label_style(layout));
  }
  for (int r = 0; r < layout.rows; ++r) {
    const double y = layout.matrix.y + (r + 0.5) * layout.cell;
    canvas.line({layout.matrix.x, y}, {layout.matrix.x - kTickLength, y}, kFrameColor, 0.8);
    canvas.text(layout.row_labels[r], row_label_anchor(layout, r), row_label_style(layout));
  }
}

void draw_colorbar(Canvas& canvas, const HeatmapLayout& layout) {
  const Rect& bar = layout.colorbar;
  canvas.vertical_gradient(bar, layout.scale.anchors());
  canvas.stroke_rect(bar, kFrameColor, 0.8);
  const Axis& axis = layout.colorbar_axis;
  for (size_t i = 0; i < axis.ticks.size(); ++i) {
    const double y = bar.bottom() - axis.fraction(axis.ticks[i]) * bar.h;
    canvas.line({bar.right(), y}, {bar.right() + kTickLength, y}, kFrameColor, 0.8);
    canvas.text(axis.labels[i], {bar.right() + kTickLength + 3, y}, colorbar_tick_style());
  }
  if (!layout.colorbar_label.empty()) {
    canvas.text(layout.colorbar_label, layout.colorbar_label_anchor, colorbar_label_style());
  }
}

void draw_heatmap(Canvas& canvas, const HeatmapLayout& layout) {
  for (size_t i = 0; i < layout.title_lines.size(); ++i) {
    const Point anchor{layout.title_anchor.x, layout.title_anchor.y + i * font_metrics(kTitleFont).line_height()};
    canvas.text(layout.title_lines[i], anchor, {kTitleFont, kTextColor, HAlign::center, VAlign::top, 0});
  }
  if (!layout.x_title.empty())
    canvas.text(layout.x_title, layout.x_title_anchor, {kAxisLabelFont, kTextColor, HAlign::center, VAlign::top, 0});
  if (!layout.y_title.empty())
    canvas.text(layout.y_title, layout.y_title_anchor, {kAxisLabelFont, kTextColor, HAlign::center, VAlign::top, 90});
  draw_heatmap_cells(canvas, layout);
  draw_heatmap_values(canvas, layout);
  canvas.stroke_rect(layout.matrix, kFrameColor, 0.8);
  draw_heatmap_labels(canvas, layout);
  draw_colorbar(canvas, layout);
}

Figure heatmap_figure(const Heatmap& heatmap, std::string_view function) {
  auto layout = std::make_shared<const HeatmapLayout>(layout_heatmap(heatmap, function));
  return {layout->width, layout->height, layout->title,
          [layout](Canvas& canvas) { draw_heatmap(canvas, *layout); }};
}

// ---------------------------------------------------------------------------------------------
// Line plot

constexpr int kLinePlotWidth = 720, kLinePlotHeight = 440;
constexpr size_t kMaxPointsWithMarkers = 40;

void validate_line_plot(const LinePlot& plot, std::string_view function) {
  SG_CHECK_VALUE(!plot.series.empty(), "{}: no series to plot", function);
  for (size_t s = 0; s < plot.series.size(); ++s) {
    const Series& series = plot.series[s];
    SG_CHECK_VALUE(!series.x.empty(), "{}: series {} ('{}') has no points", function, s,
                   series.name);
    SG_CHECK_VALUE(series.x.size() == series.y.size(),
                   "{}: series {} ('{}') has {} x values but {} y values", function, s, series.name,
                   series.x.size(), series.y.size());
    for (size_t i = 0; i < series.x.size(); ++i) {
      SG_CHECK_VALUE(std::isfinite(series.x[i]) && std::isfinite(series.y[i]),
                     "{}: series {} ('{}') point {} is ({}, {}); values must be finite", function,
                     s, series.name, i, series.x[i], series.y[i]);
      SG_CHECK_VALUE(!plot.log_y || series.y[i] > 0,
                     "{}: log_y needs y > 0 but series {} ('{}') has y[{}] = {}", function, s,
                     series.name, i, series.y[i]);
    }
  }
}

struct LinePlotLayout {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;  // y already in axis positions (log10 on a log axis)
  std::vector<std::string> names;
  Axis x_axis, y_axis;
  Rect area;
  Rect legend;
  bool show_legend = false;
  int width = kLinePlotWidth;  // wider only when the title or x label needs it
};

std::pair<double, double> data_range(const std::vector<Series>& series, bool use_y) {
  double lo = 1e300, hi = -1e300;
  for (const Series& s : series) {
    for (double v : use_y ? s.y : s.x) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  return {lo, hi};
}

Point to_screen(const LinePlotLayout& layout, double x, double y) {
  return {layout.area.x + layout.x_axis.fraction(x) * layout.area.w,
          layout.area.bottom() - layout.y_axis.fraction(y) * layout.area.h};
}

const double kLegendSwatch = 24, kLegendPad = 8;

double legend_row_height() { return font_metrics(kTickFont).line_height() + 4; }

// Among the four inner corners, the legend goes where it hides the fewest data points
// (matplotlib's loc="best", with the same preference order on ties).
Rect place_legend(const LinePlotLayout& layout, double width, double height) {
  const Rect& a = layout.area;
  const double inset = 8;
  const Rect corners[] = {{a.right() - inset - width, a.y + inset, width, height},
                          {a.x + inset, a.y + inset, width, height},
                          {a.x + inset, a.bottom() - inset - height, width, height},
                          {a.right() - inset - width, a.bottom() - inset - height, width, height}};
  size_t best = 0, best_hidden = SIZE_MAX;
  for (size_t k = 0; k < std::size(corners); ++k) {
    size_t hidden = 0;
    for (const Series& s : layout.series) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        const size_t samples = i + 1 < s.x.size() ? 8 : 1;  // sample segments, not just vertices
        for (size_t j = 0; j < samples; ++j) {
          const double t = double(j) / samples;
          const double x = i + 1 < s.x.size() ? s.x[i] + t * (s.x[i + 1] - s.x[i]) : s.x[i];
          const double y = i + 1 < s.x.size() ? s.y[i] + t * (s.y[i + 1] - s.y[i]) : s.y[i];
          hidden += corners[k].contains(to_screen(layout, x, y));
        }
      }
    }
    if (hidden < best_hidden) best = k, best_hidden = hidden;
  }
  return corners[best];
}

LinePlotLayout layout_line_plot(const LinePlot& plot, std::string_view function) {
  validate_line_plot(plot, function);
  LinePlotLayout layout;
  layout.title = title_text(plot.title);
  layout.xlabel = clean_text(plot.xlabel, kMaxTitleChars);
  layout.ylabel = clean_text(plot.ylabel, kMaxTitleChars);
  layout.series = plot.series;
  for (Series& s : layout.series) {
    layout.names.push_back(clean_text(s.name, 40));
    if (plot.log_y)
      std::transform(s.y.begin(), s.y.end(), s.y.begin(), [](double v) { return std::log10(v); });
  }
  const auto [x_lo, x_hi] = data_range(layout.series, false);
  const auto [y_lo, y_hi] = data_range(layout.series, true);
  // whole-number x (epochs): one value gets a unit on each side, ticks sit on whole numbers
  const auto [x_min, x_max] = plot.integer_x && x_hi - x_lo < 1 ? std::pair{x_lo - 1, x_hi + 1}
                                                                  : padded_range(x_lo, x_hi, 0.02);
  layout.x_axis = make_linear_axis(x_min, x_max, plot.integer_x ? 1.0 : 0.0);
  const auto [y_min, y_max] = plot.log_y && y_hi - y_lo < 1e-12 ? std::pair{y_lo - 0.5, y_hi + 0.5}
                                                                : padded_range(y_lo, y_hi, 0.05);
  layout.y_axis = plot.log_y ? make_log_axis(y_min, y_max) : make_linear_axis(y_min, y_max);

  const FontMetrics tick = font_metrics(kTickFont), label = font_metrics(kAxisLabelFont);
  const double left = kPadding + (layout.ylabel.empty() ? 0 : label.line_height() + 8) +
                      max_width(layout.y_axis.labels, kTickFont) + kTickLength + 4;
  const double top =
      kPadding +
      (layout.title.empty() ? tick.line_height() / 2 : font_metrics(kTitleFont).line_height() + 10);
  const double bottom = kPadding + (layout.xlabel.empty() ? 0 : label.line_height() + 6) +
                        tick.line_height() + kTickLength + 4;
  const double right =
      std::max(20.0, text_width(layout.x_axis.labels.back(), kTickFont) / 2 + kPadding);
  const double widest_text =
      std::max(text_width(layout.title, kTitleFont), text_width(layout.xlabel, kAxisLabelFont));
  layout.width = std::max(kLinePlotWidth, static_cast<int>(std::ceil(widest_text + left + right)));
  layout.area = {std::ceil(left), std::ceil(top), std::floor(layout.width - left - right),
                 std::floor(kLinePlotHeight - top - bottom)};
  layout.ylabel = fit_text(layout.ylabel, kAxisLabelFont, layout.area.h);

  layout.show_legend = plot.series.size() > 1 || !layout.names[0].empty();
  const double legend_width =
      2 * kLegendPad + kLegendSwatch + 6 + max_width(layout.names, kTickFont);
  const double legend_height = 2 * kLegendPad + layout.series.size() * legend_row_height() - 4;
  if (layout.show_legend) layout.legend = place_legend(layout, legend_width, legend_height);
  return layout;
}

void draw_line_plot_axes(Canvas& canvas, const LinePlotLayout& layout) {
  const Rect& a = layout.area;
  const TextStyle x_tick_style{kTickFont, kTickColor, HAlign::center, VAlign::top, 0};
  const TextStyle y_tick_style{kTickFont, kTickColor, HAlign::right, VAlign::middle, 0};
  for (size_t i = 0; i < layout.x_axis.ticks.size(); ++i) {
    const double x = a.x + layout.x_axis.fraction(layout.x_axis.ticks[i]) * a.w;
    canvas.line({x, a.y}, {x, a.bottom()}, kGridColor, 1);
    canvas.line({x, a.bottom()}, {x, a.bottom() + kTickLength}, kFrameColor, 1);
    canvas.text(layout.x_axis.labels[i], {x, a.bottom() + kTickLength + 3}, x_tick_style);
  }
  for (size_t i = 0; i < layout.y_axis.ticks.size(); ++i) {
    const double y = a.bottom() - layout.y_axis.fraction(layout.y_axis.ticks[i]) * a.h;
    canvas.line({a.x, y}, {a.right(), y}, kGridColor, 1);
    canvas.line({a.x - kTickLength, y}, {a.x, y}, kFrameColor, 1);
    canvas.text(layout.y_axis.labels[i], {a.x - kTickLength - 3, y}, y_tick_style);
  }
}

// The title is centred over the plot area unless that would push it off the figure.
void draw_axis_titles(Canvas& canvas, const std::string& title, const std::string& xlabel,
                      const std::string& ylabel, const Rect& area, double width, double height) {
  if (!title.empty()) {
    const double half = text_width(title, kTitleFont) / 2;
    const double x = std::clamp(area.x + area.w / 2, kPadding + half,
                                std::max(kPadding + half, width - kPadding - half));
    canvas.text(title, {x, kPadding}, {kTitleFont, kTextColor, HAlign::center, VAlign::top, 0});
  }
  if (!xlabel.empty()) {
    canvas.text(xlabel, {area.x + area.w / 2, height - kPadding},
                {kAxisLabelFont, kTextColor, HAlign::center, VAlign::bottom, 0});
  }
  if (!ylabel.empty()) {
    canvas.text(ylabel, {kPadding, area.y + area.h / 2},
                {kAxisLabelFont, kTextColor, HAlign::center, VAlign::top, 90});
  }
}

void draw_series(Canvas& canvas, const LinePlotLayout& layout) {
  for (size_t s = 0; s < layout.series.size(); ++s) {
    const Series& series = layout.series[s];
    std::vector<Point> points;
    for (size_t i = 0; i < series.x.size(); ++i)
      points.push_back(to_screen(layout, series.x[i], series.y[i]));
    const Rgb color = palette_color(series.color >= 0 ? series.color : s);
    canvas.polyline(points, color, 1.8);
    if (points.size() > kMaxPointsWithMarkers) continue;
    for (const Point& p : points) canvas.dot(p, 2.8, color);
  }
}

void draw_legend(Canvas& canvas, const LinePlotLayout& layout) {
  if (!layout.show_legend) return;
  canvas.fill_rect(layout.legend, kWhite);
  canvas.stroke_rect(layout.legend, rgb_hex(0xcccccc), 1);
  for (size_t s = 0; s < layout.names.size(); ++s) {
    const double y = layout.legend.y + kLegendPad + (s + 0.5) * legend_row_height() - 2;
    const double x = layout.legend.x + kLegendPad;
    const int color = layout.series[s].color;
    canvas.line({x, y}, {x + kLegendSwatch, y}, palette_color(color >= 0 ? color : s), 2);
    canvas.text(layout.names[s], {x + kLegendSwatch + 6, y},
                {kTickFont, kTextColor, HAlign::left, VAlign::middle, 0});
  }
}

Figure line_plot_figure(const LinePlot& plot, std::string_view function) {
  auto layout = std::make_shared<const LinePlotLayout>(layout_line_plot(plot, function));
  return {layout->width, kLinePlotHeight, layout->title, [layout](Canvas& canvas) {
            draw_line_plot_axes(canvas, *layout);
            draw_series(canvas, *layout);
            canvas.stroke_rect(layout->area, kFrameColor, 1);
            draw_legend(canvas, *layout);
            draw_axis_titles(canvas, layout->title, layout->xlabel, layout->ylabel, layout->area,
                             layout->width, kLinePlotHeight);
          }};
}

// ---------------------------------------------------------------------------------------------
// Bar chart

constexpr double kBarPlotHeight = 300, kMinBarPlotWidth = 240;

void validate_bar_chart(const BarChart& chart, std::string_view function) {
  SG_CHECK_VALUE(!chart.values.empty(), "{}: no bars to plot", function);
  SG_CHECK_VALUE(chart.values.size() <= 200, "{}: {} bars are too many to plot (at most 200)",
                 function, chart.values.size());
  SG_CHECK_VALUE(chart.labels.size() == chart.values.size(), "{}: {} labels for {} values",
                 function, chart.labels.size(), chart.values.size());
  for (size_t i = 0; i < chart.values.size(); ++i) {
    SG_CHECK_VALUE(std::isfinite(chart.values[i]),
                   "{}: values[{}] ('{}') is {}; values must be finite", function, i,
                   chart.labels[i], chart.values[i]);
  }
}

struct BarChartLayout {
  std::string title, ylabel;
  std::vector<std::string> labels;
  std::vector<double> values;
  std::vector<int> colors;
  Axis y_axis;
  Rect area;
  double slot = 0;  // horizontal space per bar
  bool rotate_labels = false;
  int width = 0, height = 0;
};

TextStyle bar_label_style(bool rotated) {
  return rotated ? TextStyle{kTickFont, kTextColor, HAlign::right, VAlign::middle, 45}
                 : TextStyle{kTickFont, kTextColor, HAlign::center, VAlign::top, 0};
}

// Bars are centred in the plot area, which is never narrower than kMinBarPlotWidth.
double bar_centre(const BarChartLayout& layout, size_t i) {
  const double bars_width = layout.slot * static_cast<double>(layout.values.size());
  return layout.area.x + (layout.area.w - bars_width) / 2 + (i + 0.5) * layout.slot;
}

Point bar_label_anchor(const BarChartLayout& layout, size_t i) {
  return {bar_centre(layout, i),
          layout.area.bottom() + kTickLength + (layout.rotate_labels ? 6 : 3)};
}

// Value range including 0 (bars start there), with headroom for the value written on each bar.
Axis bar_value_axis(const std::vector<double>& values) {
  double lo = std::min(0.0, *std::min_element(values.begin(), values.end()));
  double hi = std::max(0.0, *std::max_element(values.begin(), values.end()));
  if (hi == lo) hi = 1;
  const double headroom = 0.1 * (hi - lo);
  return make_linear_axis(lo < 0 ? lo - headroom : 0, hi > 0 ? hi + headroom : 0);
}

BarChartLayout layout_bar_chart(const BarChart& chart, std::string_view function) {
  validate_bar_chart(chart, function);
  BarChartLayout layout;
  layout.title = title_text(chart.title);
  layout.ylabel = clean_text(chart.ylabel, kMaxTitleChars);
  for (const std::string& l : chart.labels) layout.labels.push_back(clean_text(l, kMaxLabelChars));
  layout.values = chart.values;
  layout.colors = chart.colors;
  layout.y_axis = bar_value_axis(chart.values);
  const size_t n = chart.values.size();
  layout.slot = std::clamp(std::round(560.0 / n), 14.0, 96.0);
  layout.rotate_labels = max_width(layout.labels, kTickFont) > layout.slot - 6;

  const FontMetrics label = font_metrics(kAxisLabelFont);
  const double left = kPadding + (layout.ylabel.empty() ? 0 : label.line_height() + 8) +
                      max_width(layout.y_axis.labels, kTickFont) + kTickLength + 4;
  const double top =
      kPadding + (layout.title.empty() ? 8 : font_metrics(kTitleFont).line_height() + 10);
  layout.area = {std::ceil(left), std::ceil(top), std::max(layout.slot * n, kMinBarPlotWidth),
                 kBarPlotHeight};
  layout.ylabel = fit_text(layout.ylabel, kAxisLabelFont, kBarPlotHeight);
  // Rotated labels may reach left of the plot area and below it.
  double label_left = 0, label_bottom = 0;
  for (size_t i = 0; i < n; ++i) {
    const Rect box = text_bounds(layout.labels[i], bar_label_anchor(layout, i),
                                 bar_label_style(layout.rotate_labels));
    label_left = std::max(label_left, kPadding - box.x);
    label_bottom = std::max(label_bottom, box.bottom());
  }
  layout.area.x += std::ceil(label_left);
  const double title_width = text_width(layout.title, kTitleFont) + 2 * kPadding;
  layout.width = static_cast<int>(std::ceil(std::max(layout.area.right() + 16, title_width)));
  layout.height = static_cast<int>(std::ceil(label_bottom + kPadding));
  return layout;
}

void draw_bars(Canvas& canvas, const BarChartLayout& layout) {
  const Rect& a = layout.area;
  const double zero_y = a.bottom() - layout.y_axis.fraction(0) * a.h;
  const TextStyle value_style{{10, false}, kTickColor, HAlign::center, VAlign::bottom, 0};
  for (size_t i = 0; i < layout.values.size(); ++i) {
    const double v = layout.values[i];
    const double y = a.bottom() - layout.y_axis.fraction(v) * a.h;
    const double bar_width = layout.slot * 0.7;
    const double x = bar_centre(layout, i) - bar_width / 2;
    canvas.fill_rect({x, std::min(y, zero_y), bar_width, std::abs(zero_y - y)},
                     palette_color(i < layout.colors.size() ? layout.colors[i] : i));
    TextStyle style = value_style;
    if (v < 0) style.v_align = VAlign::top;
    const std::string value = with_minus_sign(fmt::format("{:.3g}", v));
    if (text_width(value, style.font) > layout.slot - 2)
      continue;  // crowded bars: the axis suffices
    canvas.text(value, {x + bar_width / 2, v < 0 ? y + 3 : y - 3}, style);
  }
  canvas.line({a.x, zero_y}, {a.right(), zero_y}, kFrameColor, 1);
}

void draw_bar_axes(Canvas& canvas, const BarChartLayout& layout) {
  const Rect& a = layout.area;
  const TextStyle y_tick_style{kTickFont, kTickColor, HAlign::right, VAlign::middle, 0};
  for (size_t i = 0; i < layout.y_axis.ticks.size(); ++i) {
    const double y = a.bottom() - layout.y_axis.fraction(layout.y_axis.ticks[i]) * a.h;
    canvas.line({a.x, y}, {a.right(), y}, kGridColor, 1);
    canvas.line({a.x - kTickLength, y}, {a.x, y}, kFrameColor, 1);
    canvas.text(layout.y_axis.labels[i], {a.x - kTickLength - 3, y}, y_tick_style);
  }
  for (size_t i = 0; i < layout.labels.size(); ++i) {
    const double x = bar_centre(layout, i);
    canvas.line({x, a.bottom()}, {x, a.bottom() + kTickLength}, kFrameColor, 1);
    canvas.text(layout.labels[i], bar_label_anchor(layout, i),
                bar_label_style(layout.rotate_labels));
  }
}

Figure bar_chart_figure(const BarChart& chart, std::string_view function) {
  auto layout = std::make_shared<const BarChartLayout>(layout_bar_chart(chart, function));
  return {layout->width, layout->height, layout->title, [layout](Canvas& canvas) {
            draw_bar_axes(canvas, *layout);
            draw_bars(canvas, *layout);
            canvas.stroke_rect(layout->area, kFrameColor, 1);
            draw_axis_titles(canvas, layout->title, "", layout->ylabel, layout->area, layout->width,
                             layout->height);
          }};
}

// ---------------------------------------------------------------------------------------------
// HTML report

// Plain text to HTML: escaped, blank lines separate paragraphs, single newlines become <br>.
std::string text_to_paragraphs(std::string_view text) {
  std::string html, paragraph;
  auto flush = [&] {
    if (!paragraph.empty()) html += "<p>" + paragraph + "</p>\n";
    paragraph.clear();
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      flush();
    } else {
      if (!paragraph.empty()) paragraph += "<br>\n";
      paragraph += xml_escape(clean_text(line, 100000));
    }
    start = end + 1;
  }
  flush();
  return html;
}

bool looks_like_svg(std::string_view svg) {
  const size_t first = svg.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && svg.substr(first, 4) == "<svg";
}

const char* kReportStyle = R"(<style>
body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; color: #222; line-height: 1.5;
       max-width: 1100px; margin: 2em auto; padding: 0 1.5em; }
h1 { font-size: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.3em; }
h2 { font-size: 1.25em; margin-top: 2em; }
figure { margin: 1em 0; overflow-x: auto; }
figure svg { max-width: 100%; height: auto; }
footer { margin-top: 3em; color: #888; font-size: 0.85em; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
</style>
)";

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

HeatmapGeometry heatmap_geometry(const Heatmap& heatmap) {
  const HeatmapLayout layout = layout_heatmap(heatmap, "heatmap_geometry");
  return {layout.width, layout.height, layout.cell, static_cast<int>(layout.matrix.x),
          static_cast<int>(layout.matrix.y)};
}

void write_heatmap_png(const std::string& path, const Heatmap& heatmap) {
  constexpr std::string_view kFunction = "write_heatmap_png";
  write_file_atomically(path, render_png(heatmap_figure(heatmap, kFunction), kFunction), kFunction);
}

void write_heatmap_svg(const std::string& path, const Heatmap& heatmap) {
  constexpr std::string_view kFunction = "write_heatmap_svg";
  write_file_atomically(path, render_svg(heatmap_figure(heatmap, kFunction)), kFunction);
}

std::string heatmap_svg(const Heatmap& heatmap) {
  return render_svg(heatmap_figure(heatmap, "heatmap_svg"));
}

void write_line_plot_png(const std::string& path, const LinePlot& plot) {
  constexpr std::string_view kFunction = "write_line_plot_png";
  write_file_atomically(path, render_png(line_plot_figure(plot, kFunction), kFunction), kFunction);
}

void write_line_plot_svg(const std::string& path, const LinePlot& plot) {
  constexpr std::string_view kFunction = "write_line_plot_svg";
  write_file_atomically(path, render_svg(line_plot_figure(plot, kFunction)), kFunction);
}

std::string line_plot_svg(const LinePlot& plot) {
  return render_svg(line_plot_figure(plot, "line_plot_svg"));
}

void write_bar_chart_png(const std::string& path, const BarChart& chart) {
  constexpr std::string_view kFunction = "write_bar_chart_png";
  write_file_atomically(path, render_png(bar_chart_figure(chart, kFunction), kFunction), kFunction);
}

void write_bar_chart_svg(const std::string& path, const BarChart& chart) {
  constexpr std::string_view kFunction = "write_bar_chart_svg";
  write_file_atomically(path, render_svg(bar_chart_figure(chart, kFunction)), kFunction);
}

std::string bar_chart_svg(const BarChart& chart) {
  return render_svg(bar_chart_figure(chart, "bar_chart_svg"));
}

void write_html_report(const std::string& path, const std::string& title,
                       const std::vector<ReportSection>& sections) {
  constexpr std::string_view kFunction = "write_html_report";
  const std::string heading = xml_escape(clean_text(title, 100000));
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += fmt::format("<title>{}</title>\n{}</head>\n<body>\n<h1>{}</h1>\n", heading, kReportStyle,
                      heading);
  for (size_t i = 0; i < sections.size(); ++i) {
    const ReportSection& section = sections[i];
    SG_CHECK_VALUE(section.svg.empty() || looks_like_svg(section.svg),
                   "{}: section {} ('{}') svg must be an SVG document starting with <svg, got '{}'",
                   kFunction, i, section.heading, section.svg.substr(0, 40));
    html += "<section>\n";
    if (!section.heading.empty())
      html += fmt::format("<h2>{}</h2>\n", xml_escape(clean_text(section.heading, 100000)));
    html += text_to_paragraphs(section.html_text);
    if (!section.table.empty()) {
      html += "<table>\n";
      for (size_t r = 0; r < section.table.size(); ++r) {
        const char* cell = r == 0 ? "th" : "td";
        html += "<tr>";
        for (const std::string& text : section.table[r])
          html += fmt::format("<{}>{}</{}>", cell, xml_escape(clean_text(text, 100000)), cell);
        html += "</tr>\n";
      }
      html += "</table>\n";
    }
    if (!section.svg.empty()) html += "<figure>\n" + section.svg + "</figure>\n";
    html += "</section>\n";
  }
  html += "<footer>Generated by seqgrad.</footer>\n</body>\n</html>\n";
  write_file_atomically(path, html, kFunction);
}

}  // namespace seqgrad::plot
