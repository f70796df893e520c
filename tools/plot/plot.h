// Plots for the `seqgrad attention` and `seqgrad compare` tools: attention heatmaps, line plots of
// training curves, bar charts and a self-contained HTML report. Pure C++ on std::vector data; PNGs
// are drawn with cairo, SVGs are written directly (real <text> elements, so labels stay
// searchable).
#pragma once
#include <string>
#include <vector>

namespace seqgrad::plot {

// PNGs are rendered at this many pixels per SVG unit, so text stays crisp in reports.
inline constexpr double kPngScale = 2.0;

// Attention weights of one sentence pair: values is row-major (rows = target tokens, cols = source
// tokens). Empty label vectors mean "number the rows/columns"; otherwise the counts must match.
struct Heatmap {
  std::vector<float> values;
  int rows = 0, cols = 0;
  std::vector<std::string> row_labels;  // target tokens (y axis)
  std::vector<std::string> col_labels;  // source tokens (x axis, on top)
  std::string title, colorbar_label = "weight";
  std::string x_title, y_title;  // axis titles: x below the matrix, y left of the row labels
  bool diverging = false;     // pre-softmax energies: blue-white-red centred at 0
  bool scale_to_max = false;  // viridis spans [0, max value] instead of [0, 1]
  bool show_values = true;    // write each weight in its cell when the matrix is at most 15x15
};

// Where the matrix sits in the figure, in SVG units (multiply by kPngScale for PNG pixels).
// Cell (r, c) covers [matrix_left + c * cell_size, +cell_size) x [matrix_top + r * cell_size, ...).
struct HeatmapGeometry {
  int width = 0, height = 0;
  int cell_size = 0;
  int matrix_left = 0, matrix_top = 0;
};

HeatmapGeometry heatmap_geometry(const Heatmap& heatmap);
void write_heatmap_png(const std::string& path, const Heatmap& heatmap);
void write_heatmap_svg(const std::string& path, const Heatmap& heatmap);
std::string heatmap_svg(const Heatmap& heatmap);

// One curve; x and y have the same length and every value is finite.
struct Series {
  std::string name;
  std::vector<double> x, y;
  int color = -1;  // palette index, so that one thing keeps its colour across charts; -1: by position
};

struct LinePlot {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  bool log_y = false;  // needs every y > 0
  bool integer_x = false;  // x counts something (epochs): ticks only at whole numbers
};

void write_line_plot_png(const std::string& path, const LinePlot& plot);
void write_line_plot_svg(const std::string& path, const LinePlot& plot);
std::string line_plot_svg(const LinePlot& plot);

struct BarChart {
  std::string title, ylabel;
  std::vector<std::string> labels;
  std::vector<double> values;
  std::vector<int> colors = {};  // palette index per bar (as Series::color); empty: by position
};

void write_bar_chart_png(const std::string& path, const BarChart& chart);
void write_bar_chart_svg(const std::string& path, const BarChart& chart);
std::string bar_chart_svg(const BarChart& chart);

// html_text is plain text: it is HTML-escaped, blank lines start a new paragraph and single
// newlines become line breaks. svg (optional) is an SVG document from one of the *_svg functions,
// embedded as is. table (optional) is plain-text cells, the first row being the header; it is
// HTML-escaped and drawn after the text.
struct ReportSection {
  std::string heading, html_text;
  std::string svg;
  std::vector<std::vector<std::string>> table = {};
};

void write_html_report(const std::string& path, const std::string& title,
                       const std::vector<ReportSection>& sections);

}  // namespace seqgrad::plot
