// Human-readable times and sizes, one format for every report Loom prints.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// "1.234 s", "12.345 ms" or "67.890 us".
std::string FormatSeconds(double seconds);
// "512 B", "3.00 KiB", "4.00 MiB", ... (powers of 1024); INT64_MAX, a
// saturated total, is "at least 8.00 EiB".
std::string FormatBytes(int64_t bytes);

}  // namespace loom
