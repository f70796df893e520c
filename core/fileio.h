// File I/O with durable, all-or-nothing writes: checkpoints and results are either the old file or
// the complete new one, never a torn mix. Every failure throws seqgrad::IOError naming the path.
#pragma once
#include <string>
#include <string_view>

namespace seqgrad {

// Replaces `path` with `bytes` atomically: writes a uniquely named temporary file in the same
// directory, fsyncs it, renames it over `path` and fsyncs the directory. On failure the temporary
// file is removed and the previous contents of `path` (if any) are left untouched.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole contents of `path`. Throws IOError if it is missing, a directory or unreadable, or
// does not fit in memory (a device such as /dev/zero).
std::string read_file(const std::string& path);

// read_file() for formats that only come in files (checkpoints): a FIFO, device, socket or
// directory is an IOError naming what it is, and a FIFO without a writer never blocks the reader.
std::string read_regular_file(const std::string& path);
// The same check without reading: IOError naming what `path` is unless it is a regular file.
void check_regular_file(const std::string& path);

// Appends `line` and a '\n' to `path` (created if missing) with a single write(2) on an O_APPEND
// descriptor, so concurrent writers never interleave within a line (JSON-lines metrics logs).
// `line` must not contain '\n' (ValueError); I/O failures throw IOError.
void append_line(const std::string& path, std::string_view line);

}  // namespace seqgrad
