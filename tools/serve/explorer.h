// The attention explorer page served at GET / (tools/serve/explorer.html, made a C++ string at
// build time by tools/serve/embed.py): the page's HTML, CSS and JavaScript, nothing fetched from
// elsewhere.
#pragma once

namespace seqgrad::tools::serve {
extern const char* const kExplorerHtml;
}
