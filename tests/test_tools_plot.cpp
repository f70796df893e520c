// Tests for tools/plot: heatmap, line plot and bar chart output (PNG pixels read back with cairo,
// SVG text), the HTML report, atomic writes and the errors raised for bad input.
#include <cairo.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>

#include "core/error.h"
#include "temp_dir.h"
#include "tools/plot/plot.h"

namespace fs = std::filesystem;
using namespace seqgrad::plot;

namespace {

using seqgrad::testing::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// 3 target x 4 source tokens: the maximum 1.0 sits at (1, 2) and (0, 0) is exactly zero.
Heatmap small_heatmap() {
  Heatmap h;
  h.rows = 3, h.cols = 4;
  h.values = {0.0f, 0.2f, 0.3f, 0.5f,  //
              0.0f, 0.0f, 1.0f, 0.0f,  //
              0.1f, 0.6f, 0.2f, 0.1f};
  h.col_labels = {"Die", "Straße", "příliš", "<eos>"};
  h.row_labels = {"The", "street", "trop & <eos>"};
  h.title = "Attention: Straße → street";
  return h;
}

struct Pixel {
  int r = 0, g = 0, b = 0;
};

using SurfacePtr = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

SurfacePtr load_png(const std::string& path) {
  return SurfacePtr(cairo_image_surface_create_from_png(path.c_str()), cairo_surface_destroy);
}

// Cairo stores RGB24/ARGB32 pixels as native-endian 0xAARRGGBB words.
Pixel pixel_at(cairo_surface_t* surface, int x, int y) {
  cairo_surface_flush(surface);
  const unsigned char* row =
      cairo_image_surface_get_data(surface) + y * cairo_image_surface_get_stride(surface);
  const uint32_t word = reinterpret_cast<const uint32_t*>(row)[x];
  return {int((word >> 16) & 0xff), int((word >> 8) & 0xff), int(word & 0xff)};
}

// A point inside cell (row, col), near its top-left corner so the written value is not hit.
Pixel cell_pixel(cairo_surface_t* surface, const HeatmapGeometry& g, int row, int col) {
  const double x = g.matrix_left + (col + 0.2) * g.cell_size;
  const double y = g.matrix_top + (row + 0.2) * g.cell_size;
  return pixel_at(surface, int(x * kPngScale), int(y * kPngScale));
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

LinePlot two_curves() {
  LinePlot plot{.title = "Training loss", .xlabel = "step", .ylabel = "loss", .series = {}};
  Series additive{.name = "additive", .x = {}, .y = {}},
      dot{.name = "scaled-dot <fast>", .x = {}, .y = {}};
  for (int step = 0; step <= 2000; step += 50) {
    additive.x.push_back(step), additive.y.push_back(4.0 * std::exp(-step / 600.0) + 0.5);
    dot.x.push_back(step), dot.y.push_back(4.2 * std::exp(-step / 450.0) + 0.6);
  }
  plot.series = {additive, dot};
  return plot;
}

BarChart step_times() {
  return {.title = "Time per step",
          .ylabel = "ms",
          .labels = {"additive", "scaled-dot", "none"},
          .values = {12.5, 8.25, 5.0}};
}

}  // namespace

TEST_CASE("heatmap PNG: size and viridis colours of known cells") {
  TempDir dir;
  const Heatmap heatmap = small_heatmap();
  const std::string path = dir.file("attention.png");
  write_heatmap_png(path, heatmap);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  const HeatmapGeometry g = heatmap_geometry(heatmap);
  SurfacePtr png = load_png(path);
  REQUIRE(cairo_surface_status(png.get()) == CAIRO_STATUS_SUCCESS);
  CHECK(cairo_image_surface_get_width(png.get()) == int(std::lround(g.width * kPngScale)));
  CHECK(cairo_image_surface_get_height(png.get()) == int(std::lround(g.height * kPngScale)));
  CHECK(g.matrix_left + 4 * g.cell_size < g.width);
  CHECK(g.matrix_top + 3 * g.cell_size < g.height);

  const Pixel max_cell = cell_pixel(png.get(), g, 1, 2);  // viridis(1) = #fde725, yellow
  CHECK(max_cell.r > 230);
  CHECK(max_cell.g > 210);
  CHECK(max_cell.b < 60);
  const Pixel zero_cell = cell_pixel(png.get(), g, 0, 0);  // viridis(0) = #440154, dark purple
  CHECK(zero_cell.r == doctest::Approx(0x44).epsilon(0.05));
  CHECK(zero_cell.g < 10);
  CHECK(zero_cell.b == doctest::Approx(0x54).epsilon(0.05));
  const Pixel half_cell = cell_pixel(png.get(), g, 0, 3);  // viridis(0.5) is teal
  CHECK(half_cell.g > half_cell.r + 60);
  CHECK(half_cell.b > half_cell.r + 60);
  CHECK(pixel_at(png.get(), 1, 1).r == 255);  // white background
}

TEST_CASE("heatmap PNG: scale_to_max stretches viridis to the largest value") {
  TempDir dir;
  Heatmap heatmap = small_heatmap();
  for (float& v : heatmap.values) v *= 0.5f;
  heatmap.scale_to_max = true;
  write_heatmap_png(dir.file("scaled.png"), heatmap);
  SurfacePtr png = load_png(dir.file("scaled.png"));
  const Pixel max_cell = cell_pixel(png.get(), heatmap_geometry(heatmap), 1, 2);
  CHECK(max_cell.r > 230);
  CHECK(max_cell.b < 60);
}

TEST_CASE("heatmap PNG: diverging energies are blue below 0, white at 0, red above") {
  TempDir dir;
  Heatmap energies;
  energies.rows = 2, energies.cols = 2;
  energies.values = {-3.0f, 0.0f, 1.5f, 3.0f};
  energies.diverging = true;
  energies.colorbar_label = "energy";
  write_heatmap_png(dir.file("energies.png"), energies);
  const HeatmapGeometry g = heatmap_geometry(energies);
  SurfacePtr png = load_png(dir.file("energies.png"));

  const Pixel negative = cell_pixel(png.get(), g, 0, 0);
  CHECK(negative.b > negative.r + 50);
  const Pixel zero = cell_pixel(png.get(), g, 0, 1);
  CHECK(zero.r > 235);
  CHECK(zero.g > 235);
  CHECK(zero.b > 235);
  const Pixel positive = cell_pixel(png.get(), g, 1, 1);
  CHECK(positive.r > positive.b + 50);
}

TEST_CASE("heatmap SVG: escaped UTF-8 labels, title and colour bar") {
  TempDir dir;
  const Heatmap heatmap = small_heatmap();
  const std::string svg = heatmap_svg(heatmap);
  CHECK(svg.rfind("<svg ", 0) == 0);
  CHECK(contains(svg, ">Straße</text>"));
  CHECK(contains(svg, ">příliš</text>"));
  CHECK(contains(svg, ">&lt;eos&gt;</text>"));
  CHECK(contains(svg, ">trop &amp; &lt;eos&gt;</text>"));
  CHECK_FALSE(contains(svg, "<eos>"));
  CHECK(contains(svg, "Attention: Straße → street"));
  CHECK(contains(svg, ">weight</text>"));
  CHECK(contains(svg, "linearGradient"));
  CHECK(contains(svg, ">1.00</text>"));  // the value written in the maximum cell

  write_heatmap_svg(dir.file("attention.svg"), heatmap);
  const std::string file = read_file(dir.file("attention.svg"));
  CHECK(contains(file, ">Straße</text>"));
  CHECK(contains(file, "</svg>"));
}

TEST_CASE("heatmap: large matrices drop cell values but keep labels") {
  Heatmap big;
  big.rows = 20, big.cols = 30;
  big.values.assign(600, 0.01f);
  const std::string svg = heatmap_svg(big);
  CHECK_FALSE(contains(svg, ">0.01</text>"));
  CHECK(contains(svg, ">29</text>"));  // unnamed columns are numbered
}

TEST_CASE("heatmap SVG: cells of a matrix too large for printed values tell their value on hover") {
  Heatmap big;
  big.rows = 3, big.cols = 20;
  big.values.assign(60, 0.25f);
  big.values[1 * 20 + 4] = 0.125f;
  big.col_labels.assign(20, "x");
  big.col_labels[4] = "Hund";
  big.row_labels = {"a", "dog", "<eos>"};
  const std::string svg = heatmap_svg(big);
  CHECK(svg.find("<title>dog \u2192 Hund: 0.125</title>") != std::string::npos);
  CHECK(svg.find("<title>&lt;eos&gt; \u2192 x: 0.250</title>") != std::string::npos);
  Heatmap small = big;  // values printed: no tooltips
  small.cols = 3;
  small.values.resize(9);
  small.col_labels.resize(3);
  CHECK(heatmap_svg(small).find("pointer-events") == std::string::npos);
}

TEST_CASE("heatmap SVG: axis titles, the y title left of the row labels and turned") {
  Heatmap h;
  h.rows = 2, h.cols = 2;
  h.values = {0.5f, 0.5f, 0.25f, 0.75f};
  h.row_labels = {"a", "dog"};
  h.col_labels = {"ein", "Hund"};
  const std::string plain = heatmap_svg(h);
  h.x_title = "source", h.y_title = "output";
  const std::string titled = heatmap_svg(h);
  CHECK(contains(titled, ">source</text>"));
  CHECK(contains(titled, "rotate(-90)\" y=\"") );
  CHECK(contains(titled, ">output</text>"));
  CHECK_FALSE(contains(plain, ">source</text>"));
  // the figure grows to make room: compare the SVG widths and heights
  auto size = [](const std::string& svg, const char* what) {
    size_t at = svg.find(what) + std::string(what).size() + 2;
    return std::stoi(svg.substr(at, svg.find('"', at) - at));
  };
  CHECK(size(titled, "width") > size(plain, "width"));
  CHECK(size(titled, "height") >= size(plain, "height"));  // here the colour bar is the taller part
}

TEST_CASE("heatmap SVG: a long title wraps onto several lines instead of being cut") {
  Heatmap h;
  h.rows = 1, h.cols = 2;
  h.values = {0.5f, 0.5f};
  h.title = "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund, "
            "und ein Hund läuft zwischen ihnen hin und her, während die Sonne hinter den Bergen untergeht.";
  const std::string svg = heatmap_svg(h);
  CHECK(contains(svg, ">Fünf Leute"));
  CHECK(contains(svg, "untergeht.</text>"));  // the end is drawn, not cut with an ellipsis
  CHECK_FALSE(contains(svg, "\u2026</text>"));
  size_t title_lines = 0;
  for (size_t at = svg.find("font-weight=\"bold\""); at != std::string::npos;
       at = svg.find("font-weight=\"bold\"", at + 1))
    ++title_lines;
  CHECK(title_lines >= 2);
  CHECK(title_lines <= 4);
}

TEST_CASE("heatmap SVG: a value that rounds to zero is printed without a sign") {
  Heatmap h;
  h.rows = 1, h.cols = 2;
  h.values = {-0.001f, -0.5f};
  h.diverging = true;
  const std::string svg = heatmap_svg(h);
  CHECK(svg.find(">0.00<") != std::string::npos);
  CHECK(svg.find("\u22120.00<") == std::string::npos);
  CHECK(svg.find("-0.00") == std::string::npos);
  CHECK(svg.find(">\u22120.50<") != std::string::npos);
}

TEST_CASE("plot text: invalid UTF-8 and control characters are repaired, long labels cut") {
  Heatmap heatmap;
  heatmap.rows = 1, heatmap.cols = 2;
  heatmap.values = {0.5f, 0.5f};
  heatmap.col_labels = {std::string("bad\xff\xfe") + "byte", std::string(60, 'x')};
  heatmap.row_labels = {"tab\there"};
  const std::string svg = heatmap_svg(heatmap);
  CHECK(contains(svg, ">bad\ufffd\ufffdbyte</text>"));
  CHECK(contains(svg, ">tab here</text>"));
  CHECK(contains(svg, ">" + std::string(23, 'x') + "\u2026</text>"));
}

TEST_CASE("heatmap: bad input throws ValueError naming the function and sizes") {
  TempDir dir;
  const std::string path = dir.file("bad.png");
  Heatmap heatmap = small_heatmap();

  SUBCASE("values size differs from rows * cols") {
    heatmap.values.pop_back();
    CHECK_THROWS_WITH_AS(
        write_heatmap_png(path, heatmap),
        doctest::Contains("write_heatmap_png: rows * cols = 3 * 4 = 12 but values has 11"),
        seqgrad::ValueError);
  }
  SUBCASE("label counts") {
    heatmap.col_labels.pop_back();
    CHECK_THROWS_WITH_AS(heatmap_svg(heatmap),
                         doctest::Contains("heatmap_svg: 3 col_labels for 4 cols"),
                         seqgrad::ValueError);
    heatmap = small_heatmap();
    heatmap.row_labels.push_back("extra");
    CHECK_THROWS_WITH_AS(write_heatmap_svg(path, heatmap),
                         doctest::Contains("write_heatmap_svg: 4 row_labels for 3 rows"),
                         seqgrad::ValueError);
  }
  SUBCASE("empty matrix") {
    Heatmap empty;
    CHECK_THROWS_WITH_AS(write_heatmap_png(path, empty),
                         doctest::Contains("empty matrix (rows 0, cols 0)"), seqgrad::ValueError);
  }
  SUBCASE("NaN") {
    heatmap.values[6] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(write_heatmap_png(path, heatmap),
                         doctest::Contains("values[6] (row 1, col 2) is nan"), seqgrad::ValueError);
  }
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("plot files: unwritable path throws IOError naming it; rewrites replace the file") {
  TempDir dir;
  const std::string missing = dir.file("no/such/dir/attention.png");
  CHECK_THROWS_WITH_AS(
      write_heatmap_png(missing, small_heatmap()),
      doctest::Contains(("write_heatmap_png: write_file_atomic: cannot create a temporary file "
                         "beside '" + missing + "': No such file or directory").c_str()),
      seqgrad::IOError);
  CHECK_THROWS_AS(write_html_report(dir.file("missing/report.html"), "r", {}), seqgrad::IOError);

  const std::string path = dir.file("curve.svg");
  write_line_plot_svg(path, two_curves());
  LinePlot renamed = two_curves();
  renamed.title = "Validation loss";
  write_line_plot_svg(path, renamed);
  CHECK(contains(read_file(path), "Validation loss"));
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("line plot: PNG size, legend, escaped names, log axis") {
  TempDir dir;
  const LinePlot plot = two_curves();
  write_line_plot_png(dir.file("loss.png"), plot);
  SurfacePtr png = load_png(dir.file("loss.png"));
  REQUIRE(cairo_surface_status(png.get()) == CAIRO_STATUS_SUCCESS);
  CHECK(cairo_image_surface_get_width(png.get()) == int(720 * kPngScale));
  CHECK(cairo_image_surface_get_height(png.get()) == int(440 * kPngScale));

  const std::string svg = line_plot_svg(plot);
  CHECK(contains(svg, ">Training loss</text>"));
  CHECK(contains(svg, ">additive</text>"));
  CHECK(contains(svg, ">scaled-dot &lt;fast&gt;</text>"));
  CHECK(contains(svg, ">step</text>"));
  CHECK(contains(svg, "stroke=\"#1f77b4\""));  // first series in tab10 blue
  CHECK(contains(svg, "stroke=\"#ff7f0e\""));  // second in orange

  LinePlot log_plot = plot;
  log_plot.log_y = true;
  write_line_plot_png(dir.file("loss_log.png"), log_plot);
  CHECK(contains(line_plot_svg(log_plot), ">1</text>"));
}

TEST_CASE("line plot: a single point and a flat series still get a sensible axis") {
  LinePlot plot{
      .title = "", .xlabel = "", .ylabel = "", .series = {{.name = "", .x = {3}, .y = {0.25}}}};
  CHECK(contains(line_plot_svg(plot), "<circle"));
  plot.series[0] = {.name = "flat", .x = {0, 1, 2}, .y = {0, 0, 0}};
  CHECK(contains(line_plot_svg(plot), ">flat</text>"));
}

TEST_CASE("line plot: integer_x puts ticks on whole numbers, one epoch on an axis 0..2") {
  LinePlot one{"BLEU", "epoch", "BLEU", {{"additive", {1}, {20.5}}}};
  one.integer_x = true;
  const std::string svg = line_plot_svg(one);
  CHECK(contains(svg, ">0</text>"));
  CHECK(contains(svg, ">1</text>"));
  CHECK(contains(svg, ">2</text>"));
  CHECK_FALSE(contains(svg, ">0.9"));
  CHECK_FALSE(contains(svg, ">1.1"));
  LinePlot three{"loss", "epoch", "loss", {{"additive", {1, 2, 3}, {4, 3, 2.5}}}};
  three.integer_x = true;
  CHECK_FALSE(contains(line_plot_svg(three), ">1.5</text>"));
  three.integer_x = false;
  CHECK(contains(line_plot_svg(three), ">1.5</text>"));
}

// The stroke colours of a line plot's data series (polylines 1.8 wide; ticks are thinner), in order.
std::vector<std::string> polyline_colors(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    const std::string element = svg.substr(at, svg.find("/>", at) - at);
    if (!contains(element, "stroke-width=\"1.8\"")) continue;
    out.push_back(element.substr(element.find("stroke=\"") + 8, 7));
  }
  return out;
}

TEST_CASE("line plot and bar chart: a series or bar keeps the palette colour it names") {
  LinePlot two{"BLEU", "epoch", "BLEU", {{"additive", {1, 2}, {1, 2}}, {"hybrid", {1, 2}, {2, 3}}}};
  const std::vector<std::string> by_position = polyline_colors(line_plot_svg(two));
  REQUIRE(by_position.size() >= 2);
  REQUIRE(by_position[0] != by_position[1]);
  LinePlot one{"BLEU", "epoch", "BLEU", {{"hybrid", {1, 2}, {2, 3}, 1}}};  // alone, but colour 1
  CHECK(polyline_colors(line_plot_svg(one))[0] == by_position[1]);
  BarChart bars{"speed", "ms", {"additive", "hybrid"}, {1, 2}};
  BarChart hybrid_only{"speed", "ms", {"hybrid"}, {2}, {1}};
  const std::string second_bar_fill = by_position[1];
  CHECK(contains(bar_chart_svg(bars), "fill=\"" + second_bar_fill + "\""));
  CHECK(contains(bar_chart_svg(hybrid_only), "fill=\"" + second_bar_fill + "\""));
  BarChart additive_only{"speed", "ms", {"additive"}, {2}};
  CHECK_FALSE(contains(bar_chart_svg(additive_only), "fill=\"" + second_bar_fill + "\""));
}

TEST_CASE("line plot: bad input throws ValueError naming the series") {
  LinePlot plot = two_curves();
  SUBCASE("x and y lengths differ") {
    plot.series[1].y.pop_back();
    CHECK_THROWS_WITH_AS(
        line_plot_svg(plot),
        doctest::Contains("line_plot_svg: series 1 ('scaled-dot <fast>') has 41 x values but 40 y"),
        seqgrad::ValueError);
  }
  SUBCASE("NaN") {
    plot.series[0].y[3] = std::nan("");
    CHECK_THROWS_WITH_AS(line_plot_svg(plot), doctest::Contains("series 0 ('additive') point 3"),
                         seqgrad::ValueError);
  }
  SUBCASE("log_y with a non-positive value") {
    plot.log_y = true;
    plot.series[0].y[2] = 0;
    CHECK_THROWS_WITH_AS(line_plot_svg(plot), doctest::Contains("log_y needs y > 0"),
                         seqgrad::ValueError);
  }
  SUBCASE("no series / empty series") {
    CHECK_THROWS_WITH_AS(line_plot_svg(LinePlot{}), doctest::Contains("no series"),
                         seqgrad::ValueError);
    plot.series[0].x.clear(), plot.series[0].y.clear();
    CHECK_THROWS_WITH_AS(write_line_plot_png("/tmp/unused.png", plot),
                         doctest::Contains("has no points"), seqgrad::ValueError);
  }
}

TEST_CASE("bar chart: PNG bar colours, SVG labels and values, errors") {
  TempDir dir;
  const BarChart chart = step_times();
  write_bar_chart_png(dir.file("bars.png"), chart);
  SurfacePtr png = load_png(dir.file("bars.png"));
  REQUIRE(cairo_surface_status(png.get()) == CAIRO_STATUS_SUCCESS);
  CHECK(cairo_image_surface_get_width(png.get()) > 200);

  const std::string svg = bar_chart_svg(chart);
  CHECK(contains(svg, ">Time per step</text>"));
  CHECK(contains(svg, ">scaled-dot</text>"));
  CHECK(contains(svg, ">12.5</text>"));
  CHECK(contains(svg, ">ms</text>"));
  write_bar_chart_svg(dir.file("bars.svg"), chart);
  CHECK(read_file(dir.file("bars.svg")) == svg);  // no generated ids, so identical output

  BarChart bad = chart;
  bad.labels.pop_back();
  CHECK_THROWS_WITH_AS(bar_chart_svg(bad),
                       doctest::Contains("bar_chart_svg: 2 labels for 3 values"),
                       seqgrad::ValueError);
  bad = chart;
  bad.values[1] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(write_bar_chart_png(dir.file("bad.png"), bad),
                       doctest::Contains("values[1] ('scaled-dot') is inf"), seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(bar_chart_svg(BarChart{}), doctest::Contains("no bars"),
                       seqgrad::ValueError);
}

TEST_CASE("HTML report: one self-contained file with escaped text and inline SVG") {
  TempDir dir;
  const std::string path = dir.file("report.html");
  write_html_report(path, "Run <3> & co",
                    {{.heading = "Attention",
                      .html_text = "Sentence 1 < 2\n\nsecond paragraph",
                      .svg = heatmap_svg(small_heatmap())},
                     {.heading = "Loss", .html_text = "", .svg = line_plot_svg(two_curves())}});
  const std::string html = read_file(path);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(contains(html, "<meta charset=\"utf-8\">"));
  CHECK(contains(html, "<h1>Run &lt;3&gt; &amp; co</h1>"));
  CHECK(contains(html, "<p>Sentence 1 &lt; 2</p>"));
  CHECK(contains(html, "<p>second paragraph</p>"));
  CHECK(contains(html, "<h2>Loss</h2>"));
  CHECK(contains(html, ">Straße</text>"));
  CHECK(contains(html, "<style>"));
  CHECK_FALSE(contains(html, "<table>"));
  CHECK_FALSE(contains(html, "<link"));
  CHECK_FALSE(fs::exists(path + ".tmp"));

  write_html_report(path, "t", {{.heading = "Numbers", .html_text = "", .svg = "", .table = {{"kind", "BLEU"}, {"a<b", "1.5"}}}});
  const std::string with_table = read_file(path);
  CHECK(contains(with_table, "<table>\n<tr><th>kind</th><th>BLEU</th></tr>\n<tr><td>a&lt;b</td><td>1.5</td></tr>"));

  CHECK_THROWS_WITH_AS(
      write_html_report(path, "r", {{.heading = "x", .html_text = "", .svg = "plot.svg"}}),
      doctest::Contains("section 0 ('x') svg must be an SVG document"), seqgrad::ValueError);
}
