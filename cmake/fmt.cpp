// fmt's implementation, compiled once for the builds that link fmt into the
// binary (FLOWRUN_STATIC_DEPS, FLOWRUN_STATIC_CXX; cmake/Dependencies.cmake).
// Debian ships fmt's headers and libfmt.so but no libfmt.a. Compiled header-only
// (FMT_HEADER_ONLY), every source that includes <fmt/format.h> compiled the whole
// of format-inl.h again, about a third of its compile time; here the sources see
// only the declarations, as with libfmt.so, and this one defines them.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

// What <fmt/format.h> declares and libfmt.so would define: the templates that
// the header declares extern, and the ones its inline code calls but leaves to
// the library (the float formatting, the locale's separators, vformat_to).
template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> wchar_t;
template void buffer<char>::append(const char*, const char*);
template void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);

}  // namespace detail
FMT_END_NAMESPACE
