// y = x W^T + b in bf16 on a CPU with AMX, AVX512-BF16 or AVX2 (+FMA), for the few rows a decoding forward feeds.
//
// W is packed once into panels of 32 output columns, its k dimension in pairs (the layout both bf16 dot products
// read): panel p holds W[32p .. 32p+31, :] as [K/2][32][2]. A call streams every panel from memory once. With AMX the
// rows of x go through the tile unit 16 at a time; with AVX512-BF16 (vdpbf16ps) 8 at a time, a pair of x broadcast
// against a pair of each of 16 columns. With AVX2 (laptops; AMD before Zen 4) the bf16 weights are widened to fp32 in
// registers (a bf16 is fp32's upper half), two rows at a time through fp32 FMAs, or from 5 rows on 6 at a time from
// the panel widened once. In every build, weights on the int8 grid (runtime/grid.py) are packed as 8-bit
// integers in strips of 8 columns (pack8) and multiplied by each row of x quantized to int8 on its own, per block of
// 32 k: integer dot products (VNNI's where the CPU has it), exact within a block, then scaled and added in fp32 block
// by block: the same bits in every build. Either way up to that many rows cost
// what one row costs (the weights' read), each output is computed in the same order whatever the number of rows, and
// a row is computed from that row alone: a row's bits do not depend on how many rows, or which, share the call (width
// and batch invariance, checked by runtime/invariance.py). A machine runs one of the three, so their bits never meet.
// ATen's per-operator headers, not <torch/extension.h>: parsing that one (all of torch's C++ API and pybind11) was
// most of a build's time, and a cold start waits for the build (docs/speed.md#the-rows-kernel)
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <utility>
#include <cmath>
#include <limits>
#include <numeric>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && !defined(MARS_NO_AMX)  // MARS_NO_AMX: the AVX512-BF16 path
#define MARS_AMX 1
#endif
#if !defined(MARS_AMX) && !defined(__AVX512BF16__) && defined(__AVX2__) && defined(__FMA__)
#define MARS_WIDEN 1  // bf16 weights widened to fp32 in registers, fp32 FMAs (AVX2)
#endif
// int8 copies of weights on the int8 grid (pack8), times rows quantized to int8: every build (AMX's too: its tiles
// then serve the weights off the grid). Their integer dot products are exact, so every build computes the same bits;
// with AVX512-VNNI (or AVX-VNNI) one vpdpbusd a row does what four AVX2 instructions do.
#if defined(__AVX2__) && defined(__FMA__)
#define MARS_INT8_PATH 1
#define MARS_INT8 true
#else
#define MARS_INT8 false
#endif
#if defined(MARS_INT8_PATH) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define MARS_VNNI(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#elif defined(MARS_INT8_PATH) && defined(__AVXVNNI__)
#define MARS_VNNI(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#endif
#ifdef MARS_VNNI  // vpdpbusd multiplies unsigned bytes by signed ones: pack8 stores w + 128 (its sign bit flipped)
constexpr int8_t SIGN = INT8_MIN;
#else
constexpr int8_t SIGN = 0;
#endif

namespace {
constexpr int64_t PANEL = 32;  // output columns a panel holds (two tiles of 16 fp32)
constexpr int64_t BLOCK = 16;  // rows of x a tile holds
constexpr int64_t DEPTH = 32;  // k a tile multiply consumes (16 pairs of bf16)
constexpr int VROWS = 8;       // rows of x the vector path keeps in registers (2 accumulators a row; 12 or 14 no faster)
constexpr int64_t STRIP = 8;   // output columns an int8 strip holds (pack8: one 256-bit vector of sums)
constexpr int64_t STRIP_BLOCK = STRIP * DEPTH + STRIP;  // a strip's block of 32 k: 8 x 32 int8, then 8 scale exponents

// Row n's block b of a [N, K] bf16 matrix (W's column n, or x's row n) as fp32 (k beyond K: 0)
void block_of(const c10::BFloat16* w, int64_t K, int64_t n, int64_t b, float* v) {
  for (int64_t i = 0; i < DEPTH; ++i) v[i] = b * DEPTH + i < K ? static_cast<float>(w[n * K + b * DEPTH + i]) : 0.f;
}

// A call's x against packed W: what every panel of the call reads (a thread's panels and scratch are its own)
struct PanelJob {
  const char* w;  // packed W, [panels][pairs][32][2] bf16
  const char* x;  // x's rows, `width` bf16 each (widening: fp32), k zero-padded to whole tiles of 32 (AMX: rows to 16s)
  int64_t rows;   // x's rows, as padded (with AMX a multiple of 16)
  int64_t width;  // bf16 a row of x, a multiple of 32 (pairs * 2)
};

#ifdef MARS_AMX

struct TileConfig {  // the palette-1 layout _tile_loadconfig reads
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool amx_ready() {  // Linux gives a thread the tile state only once the process asked for it
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  return ok;
}

// Panels [p0, p1) for every block of 16 rows. Tiles: 0, 1 the sums (16 rows x 16 fp32 columns each), 2 a block of x
// (16 rows x 32 bf16), 3, 4 the panel's two halves (16 pairs x 16 columns).
template <typename Emit>
void panels(const PanelJob& job, float* scratch, int64_t p0, int64_t p1, const Emit& emit) {
  const char *w = job.w, *x = job.x;
  const int64_t blocks = job.rows / BLOCK, depth = job.width / DEPTH;  // blocks of 16 rows; tiles of 32 k a row
  TileConfig cfg;
  for (int t = 0; t < 5; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  const int64_t ldx = depth * DEPTH * 2, panel_bytes = depth * (DEPTH / 2) * PANEL * 4;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t b = 0; b < blocks; ++b) {
      _tile_zero(0);
      _tile_zero(1);
      const char* wp = w + p * panel_bytes;
      for (int64_t k = 0; k < depth; ++k) {
        _tile_loadd(2, x + b * BLOCK * ldx + k * DEPTH * 2, ldx);
        _tile_loadd(3, wp + k * 16 * PANEL * 4, PANEL * 4);
        _tile_loadd(4, wp + k * 16 * PANEL * 4 + 64, PANEL * 4);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
      }
      _tile_stored(0, scratch, PANEL * 4);
      _tile_stored(1, scratch + 16, PANEL * 4);
      emit(p, b, scratch);
    }
  _tile_release();
}
#elif defined(__AVX512BF16__)
// R rows of x (bf16 pairs as 32-bit words, ldx words apart) through one panel: sums [R][32] fp32. Each sum is one
// chain of vdpbf16ps over the pairs in order, whatever R is.
template <int R>
void vector_panel(const char* wp, const int32_t* x, int64_t ldx, int64_t pairs, float* sums) {
  __m512 acc[2 * R];
  for (int i = 0; i < 2 * R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < pairs; ++j) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp + j * PANEL * 4);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + j * PANEL * 4 + 64);
    for (int r = 0; r < R; ++r) {
      const __m512bh xr = (__m512bh)_mm512_set1_epi32(x[r * ldx + j]);
      acc[2 * r] = _mm512_dpbf16_ps(acc[2 * r], xr, w0);
      acc[2 * r + 1] = _mm512_dpbf16_ps(acc[2 * r + 1], xr, w1);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(sums + r * PANEL, acc[2 * r]);
    _mm512_storeu_ps(sums + r * PANEL + 16, acc[2 * r + 1]);
  }
}

// vector_panel<1> .. vector_panel<VROWS>, by rows - 1
using PanelKernel = void (*)(const char*, const int32_t*, int64_t, int64_t, float*);
template <int... R>
constexpr std::array<PanelKernel, sizeof...(R)> kernels_for(std::integer_sequence<int, R...>) {
  return {&vector_panel<R + 1>...};
}
constexpr auto KERNELS = kernels_for(std::make_integer_sequence<int, VROWS>{});

// Panels [p0, p1) for every group of up to VROWS rows of x's M rows (width bf16 a row).
template <typename Emit>
void panels(const PanelJob& job, float* scratch, int64_t p0, int64_t p1, const Emit& emit) {
  const char *w = job.w, *x = job.x;
  const int64_t M = job.rows, width = job.width;
  const int64_t pairs = width / 2, panel_bytes = pairs * PANEL * 4;
  const int32_t* xs = reinterpret_cast<const int32_t*>(x);
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t m = 0; m < M; m += VROWS) {
      const char* wp = w + p * panel_bytes;
      const int32_t* xm = xs + m * pairs;
      KERNELS[std::min<int64_t>(VROWS, M - m) - 1](wp, xm, pairs, pairs, scratch);
      emit(p, m, std::min<int64_t>(VROWS, M - m), scratch);
    }
}
#elif defined(MARS_WIDEN)
// 8 columns' pair of k as fp32 (a 32-bit word each: the even k in its low half, the odd k in its high half)
inline void widen_pair(const char* p, __m256& even, __m256& odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// One panel (32 columns, 4 groups of 8) for R rows of x (fp32, ldx floats apart): sums[r * 32 + c]. A pair's 32-bit
// word holds its even k in the low half and its odd k in the high half, so a shift and a mask widen 8 columns' pair
// to two fp32 vectors; each sum is one chain of FMAs over k in order, whatever R is. The panel streams from memory
// once for the R rows (4 rows would need 16 sums and spill).
template <int R>
void widened_panel(const char* wp, const float* x, int64_t ldx, int64_t pairs, float* sums) {
  __m256 acc[R * 4];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 4; ++g) acc[r * 4 + g] = _mm256_setzero_ps();
  for (int64_t j = 0; j < pairs; ++j)
    for (int g = 0; g < 4; ++g) {
      __m256 even, odd;
      widen_pair(wp + j * PANEL * 4 + g * 32, even, odd);
      for (int r = 0; r < R; ++r) {
        acc[r * 4 + g] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * ldx + 2 * j), even, acc[r * 4 + g]);
        acc[r * 4 + g] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * ldx + 2 * j + 1), odd, acc[r * 4 + g]);
      }
    }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < 4; ++g) _mm256_storeu_ps(sums + r * PANEL + g * 8, acc[r * 4 + g]);
}

// One panel widened to fp32 once ([k][32]: each weight the fp32 value widened_panel computes with) for R rows, 16
// columns a pass: sums[r * 32 + c], each the same chain of FMAs over k in order as its, so the same bits. For
// WIDE_FROM rows or more: the widening is paid once for all rows, and 6 rows keep 12 sums, 2 weights and x in
// registers.
template <int R>
void fp32_panel(const float* wide, const float* x, int64_t ldx, int64_t depth, float* sums) {
  for (int h = 0; h < 2; ++h) {
    __m256 acc[R * 2];
    for (int i = 0; i < R * 2; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < depth; ++k) {
      const __m256 w0 = _mm256_loadu_ps(wide + k * PANEL + h * 16), w1 = _mm256_loadu_ps(wide + k * PANEL + h * 16 + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 xr = _mm256_broadcast_ss(x + r * ldx + k);
        acc[2 * r] = _mm256_fmadd_ps(xr, w0, acc[2 * r]);
        acc[2 * r + 1] = _mm256_fmadd_ps(xr, w1, acc[2 * r + 1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(sums + r * PANEL + h * 16, acc[2 * r]);
      _mm256_storeu_ps(sums + r * PANEL + h * 16 + 8, acc[2 * r + 1]);
    }
  }
}

constexpr int FROWS = 6;      // rows of x fp32_panel keeps in registers
constexpr int64_t WIDE_FROM = 5;  // rows from which a widened panel pays (its stores and reloads cost 2-3 passes)
using WideKernel = void (*)(const float*, const float*, int64_t, int64_t, float*);
template <int... R>
constexpr std::array<WideKernel, sizeof...(R)> fp32_kernels_for(std::integer_sequence<int, R...>) {
  return {&fp32_panel<R + 1>...};
}
constexpr auto FP32_KERNELS = fp32_kernels_for(std::make_integer_sequence<int, FROWS>{});

// Panel wp (bf16 pairs) as fp32 [width][32]: exactly the vectors widened_panel multiplies by
void widen_panel(const char* wp, int64_t width, float* wide) {
  for (int64_t j = 0; j < width / 2; ++j)
    for (int g = 0; g < 4; ++g) {
      __m256 even, odd;
      widen_pair(wp + j * PANEL * 4 + g * 32, even, odd);
      _mm256_storeu_ps(wide + 2 * j * PANEL + g * 8, even);
      _mm256_storeu_ps(wide + (2 * j + 1) * PANEL + g * 8, odd);
    }
}

// Panels [p0, p1) for every group of rows of x's M rows (fp32, width a row), of a bf16 copy: two rows a pass
// straight from the copy, or from WIDE_FROM rows on, 6 a pass from the panel widened once.
template <typename Emit>
void panels(const PanelJob& job, float* scratch, int64_t p0, int64_t p1, const Emit& emit) {
  const float* xs = reinterpret_cast<const float*>(job.x);
  const int64_t M = job.rows, width = job.width;
  const int64_t panel_bytes = width * PANEL * 2;
  if (M >= WIDE_FROM) {
    thread_local std::vector<float> wide;
    wide.resize(width * PANEL);
    for (int64_t p = p0; p < p1; ++p) {
      widen_panel(job.w + p * panel_bytes, width, wide.data());
      for (int64_t m = 0; m < M; m += FROWS) {
        const int64_t rows = std::min<int64_t>(FROWS, M - m);
        FP32_KERNELS[rows - 1](wide.data(), xs + m * width, width, width, scratch);
        emit(p, m, rows, scratch);
      }
    }
    return;
  }
  // a lone row goes through the two-row kernel as both rows (GCC 12 keeps a one-row kernel's sums on the stack,
  // storing them every step): the same chain of FMAs, so the same bits
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t m = 0; m < M; m += 2) {
      widened_panel<2>(job.w + p * panel_bytes, xs + m * width, M - m > 1 ? width : 0, width / 2, scratch);
      emit(p, m, std::min<int64_t>(2, M - m), scratch);
    }
}

#endif

#if defined(__AVX2__)  // also the AVX2 attention's (store8)
// 8 fp32 to bf16 as c10::BFloat16(float) rounds them (round to nearest even on the bits; a NaN to 0x7FC0), stored at out
inline void store_bf16x8(c10::BFloat16* out, __m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i bias = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)),
                                        _mm256_set1_epi32(0x7FFF));
  const __m256i r = _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_add_epi32(u, bias), 16), _mm256_set1_epi32(0x7FC0),
                                       _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}
#endif

#ifdef MARS_INT8_PATH
// 8-bit weights (pack8) times rows of x quantized to int8, each row on its own (quantize_rows): integer dot products.
#if defined(MARS_VNNI) && defined(__AVX512VL__)
constexpr int QROWS = 8;  // rows int8_strip keeps in registers (a sum and a dot product a row: of 32 with AVX512VL)
#else
constexpr int QROWS = 4;  // rows int8_strip keeps in registers (a sum and a block's dot product a row)
#endif
constexpr int64_t PREFETCH = 8 * STRIP_BLOCK;  // bytes ahead of the block in use that int8_strip asks the cache for

// What a block of x whose largest |x| is m is multiplied by before rounding: 127 / m; 0 for a block of zeros, and for
// one so small (m below about 4e-37) that 127 / m is not finite: its values quantize to 0, as a zero block's do
inline float up_of(float m) {
  const float up = m > 0.f ? 127.f / m : 0.f;
  return std::isfinite(up) ? up : 0.f;
}

// Block b of x's row m quantized (quantize_rows), k beyond K as 0, one value at a time: a row's last block where K is
// not a multiple of 32
void quantize_tail(const c10::BFloat16* x, int64_t K, int64_t m, int64_t b, int8_t* q, float* scale) {
  float v[DEPTH];
  float most = 0.f;
  bool finite = true;
  block_of(x, K, m, b, v);
  for (int64_t i = 0; i < DEPTH; ++i) {
    finite = finite && std::isfinite(v[i]);
    most = std::max(most, std::fabs(v[i]));
  }
  const float up = finite ? up_of(most) : 0.f;
  for (int64_t i = 0; i < DEPTH; ++i)
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(v[i] * up), -127.f, 127.f));
  *scale = finite ? most / 127.f : std::numeric_limits<float>::quiet_NaN();
}

// A whole block of 32 bf16 quantized as quantize_tail does, 8 lanes a vector: the same largest |x| (a max is exact in
// any order), the same 127 / m, the same fp32 products rounded to nearest even, so the same q and scale bit for bit
// (a non-finite block: q unused, its scale NaN)
inline void quantize_block(const c10::BFloat16* x, int8_t* q, float* scale) {
  const __m256i inf = _mm256_set1_epi32(0x7F800000), magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  __m256 v[4];
  __m256i special = _mm256_setzero_si256();  // lanes whose exponent is all ones: inf or NaN
  __m256 most = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {  // a bf16 is fp32's upper half
    const __m256i u = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 8 * i))), 16);
    special = _mm256_or_si256(special, _mm256_cmpeq_epi32(_mm256_and_si256(u, inf), inf));
    v[i] = _mm256_castsi256_ps(u);
    most = _mm256_max_ps(most, _mm256_castsi256_ps(_mm256_and_si256(u, magnitude)));
  }
  if (!_mm256_testz_si256(special, special)) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
  half = _mm_max_ps(half, _mm_movehl_ps(half, half));
  const float m = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
  const __m256 up = _mm256_set1_ps(up_of(m));
  const __m256 lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  __m256i n[4];
  for (int i = 0; i < 4; ++i)
    n[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(
        _mm256_round_ps(_mm256_mul_ps(v[i], up), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi));
  // int32 -> int8 (no value saturates: all within +-127); packs work within 128-bit lanes, the permute restores order
  const __m256i words = _mm256_packs_epi32(n[0], n[1]), words2 = _mm256_packs_epi32(n[2], n[3]);
  const __m256i bytes = _mm256_packs_epi16(words, words2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  *scale = m / 127.f;
}

// Where row m's block b of quantized x lies (quantize_rows): rows in groups of QROWS (the last one fewer), a group's
// blocks in k order, each block's rows side by side, so a kernel reads a group's rows at fixed offsets from one
// pointer (a pointer a row spilled GCC's general registers into vector ones, a move each per block and row)
inline int64_t block_at(int64_t m, int64_t b, int64_t M, int64_t blocks) {
  const int64_t first = m / QROWS * QROWS, rows = std::min<int64_t>(QROWS, M - first);
  return first * blocks + b * rows + m - first;
}

// x's M rows (bf16, K a row) quantized per block of 32 k, each row by itself: q = round(x * 127 / m), m the block's
// largest |x|, its scale m / 127 (a block of zeros: 0; one with a non-finite x: NaN, so the row's outputs are NaN).
// Block i = block_at(m, b) holds q[i * 32 ..] (k beyond K: 0) and scale[i].
void quantize_rows(const c10::BFloat16* x, int64_t M, int64_t K, int64_t blocks, int8_t* q, float* scale) {
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i = block_at(m, b, M, blocks);
        if ((b + 1) * DEPTH <= K)
          quantize_block(x + m * K + b * DEPTH, q + i * DEPTH, scale + i);
        else
          quantize_tail(x, K, m, b, q + i * DEPTH, scale + i);
      }
  });
}

// 8 scales 2^e from their exponents e (int8, -126 to 127)
inline __m256 exp2_8(const int8_t* e) {
  const __m256i e32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e32, _mm256_set1_epi32(127)), 23));
}

// A block's exact integer dot products of R quantized rows (x: their blocks side by side, block_at) with a strip's 8
// columns, added to dot[r]: with the row's start (int8_strip), lane c ends at the sum over the block's 32 k of x[r][k]
// w[k][c] (|x|, |w| <= 127: at most 32 * 127 * 127 in int32). With VNNI, vpdpbusd multiplies w + 128 (pack8 stores it:
// unsigned bytes) by x and adds 4 products a lane (at most 32 * 255 * 127 in all), and dot[r] starts at -128 sum_k x
// (the row's `start`, one number a row and block, the same for every column; |start| <= 128 * 32 * 127, so every
// partial sum stays far inside int32); with AVX2, vpmaddubsw multiplies |w| by x carrying w's sign and adds pairs,
// vpmaddwd adds pairs again (dot[r] starts at 0). The same integers either way.
template <int R>
inline void block_dots(const int8_t* w, const int8_t* x, __m256i* dot) {
#ifdef MARS_VNNI  // w arrives as w + 128 (pack8 flips its sign bits), x as it is
  // Unrolled (GCC otherwise keeps 8 rows' loop rolled, copying every sum between registers), and wq held in a
  // register for all rows (the empty asm: GCC otherwise reads it from memory again for each row's dot product, two
  // loads an instruction where one row's 8 go latency-bound); what rows cost: docs/speed.md#where-a-forwards-time-goes
#pragma GCC unroll 8
  for (int64_t j = 0; j < DEPTH / 4; ++j) {
    __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 32));  // [8 columns][4 k]
    __asm__("" : "+x"(wq));
    for (int r = 0; r < R; ++r)  // the row's 4 k, broadcast from memory (not through a general register)
      dot[r] = MARS_VNNI(dot[r], wq, _mm256_broadcastd_epi32(_mm_loadu_si32(x + r * DEPTH + j * 4)));
  }
#else
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 1  // unrolled, GCC 12 keeps every product to add them up at the end, on the stack
  for (int64_t j = 0; j < DEPTH / 4; ++j) {
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 32));  // [8 columns][4 k]
    const __m256i size = _mm256_abs_epi8(wq);
    for (int r = 0; r < R; ++r) {
      int32_t four;  // the row's 4 k, against every column
      std::memcpy(&four, x + r * DEPTH + j * 4, 4);
      const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(four), wq);
      dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(_mm256_maddubs_epi16(size, signed_x), ones));
    }
  }
#endif
}

// One strip of pack8's W (8 columns, its blocks in k order) for a group of R quantized rows (q, scale and start at
// the group's first block: block_at): sums[r * 8 + c]. A block's exact integer dot products (block_dots, from the
// row's start) times both scales are added to the row's fp32 sum, blocks in order: a row's sums are the same bits
// whatever R and whatever its batchmates.
template <int R>
void int8_strip(const int8_t* w, const int8_t* q, const float* scale, const int32_t* start, int64_t blocks,
                float* sums) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, w += STRIP_BLOCK) {
    for (int64_t line = 0; line < STRIP_BLOCK; line += 64)  // the stream ahead (the prefetchers alone lag the loop)
      _mm_prefetch(reinterpret_cast<const char*>(w) + PREFETCH + line, _MM_HINT_T0);
    __m256i dot[R];
    for (int r = 0; r < R; ++r) dot[r] = _mm256_set1_epi32(start[b * R + r]);
    block_dots<R>(w, q + b * R * DEPTH, dot);
    const __m256 wscale = exp2_8(w + STRIP * DEPTH);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), _mm256_mul_ps(wscale, _mm256_set1_ps(scale[b * R + r])),
                               acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(sums + r * STRIP, acc[r]);
}

// int8_strip's and int8_pair's signature (w, q, scale, start, blocks, sums): a table of each by its rows, 1 to QROWS
using Int8Kernel = void (*)(const int8_t*, const int8_t*, const float*, const int32_t*, int64_t, float*);

#if defined(MARS_VNNI) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)
#define MARS_PAIRS 1  // two strips a pass in 512-bit vectors (AVX512-VNNI builds; DQ: _mm512_insertf32x8)
// int8_strip for strip w and the next, w2, at once (16 columns, sums[r * 16 + c], w's 8 first): each lane's integers
// and fp32 steps are int8_strip's, in 512-bit vectors, so a column's bits are the same in a pair or alone. One x
// broadcast and one block's scaling serve 16 columns, not 8: faster where rows are many (the strips then stay in cache
// for several groups of rows), slower where a call of a few rows streams its strips once (two streams a thread for
// one); product8 picks by the rows (what rows cost: docs/speed.md#where-a-forwards-time-goes).
constexpr int64_t PAIR_PREFETCH = 32 * STRIP_BLOCK;  // bytes ahead of the block in use that int8_pair asks for
template <int R>
void int8_pair(const int8_t* w, const int8_t* q, const float* scale, const int32_t* start, int64_t blocks,
               float* sums) {
  const int8_t* w2 = w + blocks * STRIP_BLOCK;  // the next strip
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, w += STRIP_BLOCK, w2 += STRIP_BLOCK) {
    for (int64_t line = 0; line < STRIP_BLOCK; line += 64) {  // both streams, further ahead than int8_strip's one
      _mm_prefetch(reinterpret_cast<const char*>(w) + PAIR_PREFETCH + line, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w2) + PAIR_PREFETCH + line, _MM_HINT_T0);
    }
    __m512i dot[R];
    for (int r = 0; r < R; ++r) dot[r] = _mm512_set1_epi32(start[b * R + r]);
    const int8_t* x = q + b * R * DEPTH;  // the group's rows' block b, side by side (block_at)
#pragma GCC unroll 8
    for (int64_t j = 0; j < DEPTH / 4; ++j) {  // [16 columns][4 k]: w's 8 columns, then w2's
      __m512i wq = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 32))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w2 + j * 32)), 1);
      __asm__("" : "+v"(wq));  // held in a register for all rows (as block_dots)
      for (int r = 0; r < R; ++r)  // the row's 4 k, broadcast from memory
        dot[r] = _mm512_dpbusd_epi32(dot[r], wq, _mm512_broadcastd_epi32(_mm_loadu_si32(x + r * DEPTH + j * 4)));
    }
    const __m512 wscale = _mm512_insertf32x8(_mm512_castps256_ps512(exp2_8(w + STRIP * DEPTH)),
                                             exp2_8(w2 + STRIP * DEPTH), 1);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), _mm512_mul_ps(wscale, _mm512_set1_ps(scale[b * R + r])),
                               acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(sums + r * 2 * STRIP, acc[r]);
}

template <int... R>
constexpr std::array<Int8Kernel, sizeof...(R)> pair_kernels_for(std::integer_sequence<int, R...>) {
  return {&int8_pair<R + 1>...};
}
constexpr auto PAIR_KERNELS = pair_kernels_for(std::make_integer_sequence<int, QROWS>{});
#endif

template <int... R>
constexpr std::array<Int8Kernel, sizeof...(R)> strip_kernels_for(std::integer_sequence<int, R...>) {
  return {&int8_strip<R + 1>...};
}
constexpr auto INT8_KERNELS = strip_kernels_for(std::make_integer_sequence<int, QROWS>{});
#endif
}  // namespace

#ifdef MARS_AMX
bool available() { return amx_ready(); }
std::string flavor() { return "amx"; }
#elif defined(__AVX512BF16__)
bool available() { return true; }
std::string flavor() { return "avx512_bf16"; }
#elif defined(MARS_WIDEN) && defined(__AVX512F__)
bool available() { return true; }
std::string flavor() { return "avx512"; }
#elif defined(MARS_WIDEN)
bool available() { return true; }
std::string flavor() { return "avx2"; }
#else
bool available() { return false; }
std::string flavor() { return "none"; }
#endif

#ifdef __AVX512F__
namespace {
// 16 fp32 to bf16 as c10::BFloat16(float) rounds them (round to nearest even on the bits; a NaN to 0x7FC0), the
// lanes of `lanes` stored at out
inline void store_bf16x16(c10::BFloat16* out, __mmask16 lanes, __m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i bias = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)),
                                        _mm512_set1_epi32(0x7FFF));
  const __m512i r = _mm512_mask_mov_epi32(_mm512_srli_epi32(_mm512_add_epi32(u, bias), 16),
                                          _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  _mm512_mask_cvtepi32_storeu_epi16(out, lanes, r);
}
}  // namespace
#endif

namespace {
// Each op's checks of its inputs: a wrong input is refused with the op's name and what is wrong (a RuntimeError in
// Python), before anything is read from it.
void check_cpu(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " is on ", t.device(), ", the kernel takes CPU tensors");
}

// k's pairs of a packed matrix: [panels][pairs][32][2] bf16, or pack8's [strips][k / 32][264] int8
int64_t packed_pairs(const at::Tensor& packed) {
  return packed.scalar_type() == at::kChar ? packed.size(1) * DEPTH / 2 : packed.size(1);
}

// A packed matrix as pack() makes it, bf16 [panels][pairs][32][2] or int8 [strips][k / 32][264], holding n columns
void check_packed(const char* op, const at::Tensor& packed, int64_t n) {
  check_cpu(op, "packed", packed);
  if (packed.scalar_type() == at::kChar) {
    TORCH_CHECK(packed.dim() == 3 && packed.size(2) == STRIP_BLOCK, op, ": packed has shape ", packed.sizes(),
                ", not pack8's [strips, k / 32, ", STRIP_BLOCK, "]");
    TORCH_CHECK(MARS_INT8, op, ": an int8 copy, and this build has no int8 path (AVX2 with FMA)");
    TORCH_CHECK(packed.is_contiguous(), op, ": packed is not contiguous");
    const int64_t strips = packed.size(0);
    TORCH_CHECK(n > 0 && n <= strips * STRIP && n > (strips - 1) * STRIP, op, ": n is ", n, ", packed's ", strips,
                " strips of 8 hold ", std::max<int64_t>(0, (strips - 1) * STRIP + 1), " to ", strips * STRIP,
                " columns");
    return;
  } else {
    TORCH_CHECK(packed.dim() == 4 && packed.size(2) == PANEL && packed.size(3) == 2 &&
                packed.size(1) % (DEPTH / 2) == 0, op, ": packed has shape ", packed.sizes(),
                ", not pack()'s [panels, pairs, 32, 2]");
    TORCH_CHECK(packed.scalar_type() == at::kBFloat16, op, ": packed is ", packed.scalar_type(), ", not bf16 or int8");
  }
  TORCH_CHECK(packed.is_contiguous(), op, ": packed is not contiguous");
  const int64_t panel_count = packed.size(0);
  TORCH_CHECK(n > 0 && n <= panel_count * PANEL && n > (panel_count - 1) * PANEL, op, ": n is ", n, ", packed's ",
              panel_count, " panels of 32 hold ", std::max<int64_t>(0, (panel_count - 1) * PANEL + 1), " to ",
              panel_count * PANEL, " columns");
}

// x [..., K] bf16 for a packed matrix of `pairs` pairs of k (K rounded up to whole 32s)
void check_x(const char* op, const at::Tensor& x, int64_t pairs) {
  check_cpu(op, "x", x);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, op, ": x is ", x.scalar_type(), ", not bf16");
  TORCH_CHECK(x.dim() >= 1, op, ": x has no dimensions, it needs [..., K]");
  const int64_t K = x.size(-1);
  TORCH_CHECK((K + DEPTH - 1) / DEPTH * (DEPTH / 2) == pairs, op, ": x has ", K, " values a row, the packed weight ",
              std::max<int64_t>(0, pairs * 2 - DEPTH + 1), " to ", pairs * 2);
}

// a bias of `cols` values (1-D, CPU, floating), or none
void check_bias(const char* op, const std::optional<at::Tensor>& bias, int64_t cols) {
  if (!bias.has_value()) return;
  check_cpu(op, "bias", *bias);
  TORCH_CHECK(bias->dim() == 1, op, ": bias has ", bias->dim(), " dimensions, not 1");
  TORCH_CHECK(at::isFloatingType(bias->scalar_type()), op, ": bias is ", bias->scalar_type(), ", not floating");
  TORCH_CHECK(bias->numel() == cols, op, ": bias has ", bias->numel(), " values, the weight has ", cols,
              " output columns");
}

// a checked bias's values in fp32, appended to b
void append_bias(std::vector<float>& b, const at::Tensor& bias) {
  auto bf = bias.to(at::kFloat).contiguous();
  b.insert(b.end(), bf.data_ptr<float>(), bf.data_ptr<float>() + bf.numel());
}

struct Columns {  // columns [col0, col1) of a packed matrix of n
  int64_t n, col0, col1;
};

// x [..., K] bf16 (checked) through columns [col0, col1) of packed W: [..., col1 - col0] bf16, each sum rounded to
// bf16 once (round to nearest even, as torch rounds), bias[c - col0] (fp32, col1 - col0 of them, or none: +0 is
// added, as a zero bias would be) added in fp32 first. Only the panels holding those columns are computed; each
// output is its own chain over k, so a column's bits are those the whole matrix's product gives it.
#ifdef MARS_INT8_PATH
// product() of pack8's W: x's rows quantized to int8 each on its own, then each strip of 8 columns for QROWS rows at
// a time (the strip stays in cache for all rows; two strips a pass, int8_pair, where the call has QROWS rows or
// more: the same steps in every lane), each sum rounded to bf16 once with the bias added in fp32 first
at::Tensor product8(const at::Tensor& x, const at::Tensor& packed, Columns cols, const std::vector<float>& b) {
  const int64_t K = x.size(-1), blocks = packed.size(1), col0 = cols.col0, col1 = cols.col1, width_out = col1 - col0;
  const int64_t M = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1));
  auto xs = x.reshape({M, K}).contiguous();
  std::vector<int8_t> q(M * blocks * DEPTH);
  std::vector<float> scale(M * blocks);
  quantize_rows(xs.data_ptr<c10::BFloat16>(), M, K, blocks, q.data(), scale.data());
  // where each row's block's dot products start: with VNNI -128 sum_k x, taking off what w + 128 (pack8) adds
  std::vector<int32_t> start(M * blocks, 0);
#ifdef MARS_VNNI
  for (int64_t i = 0; i < M * blocks; ++i)
    start[i] = -128 * std::accumulate(q.begin() + i * DEPTH, q.begin() + (i + 1) * DEPTH, int32_t{0});
#endif
  auto sizes = x.sizes().vec();
  sizes.back() = width_out;
  auto y = at::empty(sizes, x.options());
  c10::BFloat16* out = y.data_ptr<c10::BFloat16>();
  const int8_t* w = packed.data_ptr<int8_t>();
  // strip s's sums for rows [m, m + rows) (row r's 8 at sums + r * ld) to y, the bias added in fp32 first, then
  // each rounded to bf16 once
  auto emit = [&](int64_t s, int64_t m, int64_t rows, const float* sums, int64_t ld) {
    const int64_t lo = std::max(s * STRIP, col0), hi = std::min(s * STRIP + STRIP, col1);
    for (int64_t r = 0; r < rows; ++r)
      if (hi - lo == STRIP)  // a whole strip: one vector
        store_bf16x8(out + (m + r) * width_out + lo - col0,
                     _mm256_add_ps(_mm256_loadu_ps(sums + r * ld),
                                   b.empty() ? _mm256_setzero_ps() : _mm256_loadu_ps(b.data() + lo - col0)));
      else
        for (int64_t c = lo; c < hi; ++c)
          out[(m + r) * width_out + c - col0] =
              c10::BFloat16(sums[r * ld + c - s * STRIP] + (b.empty() ? 0.f : b[c - col0]));
  };
  const int64_t first = col0 / STRIP, last = (col1 + STRIP - 1) / STRIP;  // strips [first, last)
#ifdef MARS_PAIRS
  const int64_t unit = M >= QROWS ? 2 : 1;  // strips a pass: two (int8_pair) from a whole group of rows on
#else
  const int64_t unit = 1;
#endif
  at::parallel_for(0, (last - first + unit - 1) / unit, 1, [&](int64_t u0, int64_t u1) {
    alignas(64) float sums[QROWS * STRIP * 2];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t s = first + u * unit;
      for (int64_t m = 0; m < M; m += QROWS) {
        const int64_t rows = std::min<int64_t>(QROWS, M - m);
        const int8_t* wq = w + s * blocks * STRIP_BLOCK;
#ifdef MARS_PAIRS
        if (unit == 2 && s + 1 < last) {  // the last strip alone where their count is odd
          PAIR_KERNELS[rows - 1](wq, q.data() + m * blocks * DEPTH, scale.data() + m * blocks,
                                 start.data() + m * blocks, blocks, sums);
          emit(s, m, rows, sums, 2 * STRIP);
          emit(s + 1, m, rows, sums + STRIP, 2 * STRIP);
          continue;
        }
#endif
        INT8_KERNELS[rows - 1](wq, q.data() + m * blocks * DEPTH, scale.data() + m * blocks,
                               start.data() + m * blocks, blocks, sums);
        emit(s, m, rows, sums, STRIP);
      }
    }
  });
  return y;
}
#endif

thread_local double product_seconds = 0;  // this thread's time inside product() (linear_seconds)

// Adds the time from its making to its end to this thread's product_seconds
struct ProductClock {
  const std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();
  ~ProductClock() { product_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(); }
};

at::Tensor product(const at::Tensor& x, const at::Tensor& packed, Columns cols, const std::vector<float>& b) {
  const ProductClock clock;
  const int64_t K = x.size(-1), pairs = packed_pairs(packed), col0 = cols.col0, col1 = cols.col1;
  const int64_t width_out = col1 - col0;
  TORCH_CHECK(available(), "mars_rows.linear: no AMX tile state, AVX512-BF16 or AVX2 on this CPU");
  TORCH_CHECK(b.empty() || static_cast<int64_t>(b.size()) == width_out, "mars_rows.linear: a bias of ", b.size(),
              " values for ", width_out, " columns");
#ifdef MARS_INT8_PATH
  if (packed.scalar_type() == at::kChar) return product8(x, packed, cols, b);
#endif
  const int64_t M = c10::multiply_integers(x.sizes().slice(0, x.dim() - 1)), width = pairs * 2;
#ifdef MARS_AMX
  const int64_t blocks = (M + BLOCK - 1) / BLOCK, padded_rows = blocks * BLOCK;  // whole tiles of rows
#else
  const int64_t padded_rows = M;
#endif
  auto xs = x.reshape({M, K}).contiguous();
#ifdef MARS_WIDEN
  auto padded = at::zeros({padded_rows, width}, x.options().dtype(at::kFloat));  // widened once, k to whole 32s
  const c10::BFloat16* src = xs.data_ptr<c10::BFloat16>();
  float* wide = padded.data_ptr<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) wide[m * width + k] = static_cast<float>(src[m * K + k]);
  const char* dst = reinterpret_cast<const char*>(wide);
#else
  auto padded = at::empty({padded_rows, width}, x.options());  // whole tiles of k
  const char* src = static_cast<const char*>(xs.data_ptr());
  char* dst = static_cast<char*>(padded.data_ptr());
  for (int64_t m = 0; m < padded_rows; ++m) {
    char* row = dst + m * width * 2;
    if (m < M) std::memcpy(row, src + m * K * 2, K * 2);
    std::memset(row + (m < M ? K * 2 : 0), 0, (m < M ? width - K : width) * 2);
  }
#endif
  auto sizes = x.sizes().vec();
  sizes.back() = width_out;
  auto y = at::empty(sizes, x.options());
  c10::BFloat16* out = y.data_ptr<c10::BFloat16>();
  const PanelJob job{static_cast<const char*>(packed.data_ptr()), dst, padded_rows, width};
  // rows [m0, m0 + rows) of one panel's sums, its columns among [col0, col1), to y, each rounded to bf16 once, the
  // bias added in fp32 first
  auto emit = [&](int64_t p, int64_t m0, int64_t rows, const float* sums) {
    const int64_t c0 = p * PANEL, lo = std::max(c0, col0), hi = std::min(c0 + PANEL, col1);
#ifndef __AVX512F__  // c10::BFloat16(float) rounds to nearest even, as store_bf16x8 and store_bf16x16 do
    for (int64_t r = 0; r < rows && m0 + r < M; ++r) {
      int64_t c = lo;
#ifdef MARS_WIDEN
      for (; c + 8 <= hi; c += 8)  // 8 columns a vector, the panel's tail one at a time
        store_bf16x8(out + (m0 + r) * width_out + c - col0,
                     _mm256_add_ps(_mm256_loadu_ps(sums + r * PANEL + c - c0),
                                   b.empty() ? _mm256_setzero_ps() : _mm256_loadu_ps(b.data() + c - col0)));
#endif
      for (; c < hi; ++c)
        out[(m0 + r) * width_out + c - col0] =
            c10::BFloat16(sums[r * PANEL + c - c0] + (b.empty() ? 0.f : b[c - col0]));
    }
#else
    for (int64_t r = 0; r < rows && m0 + r < M; ++r) {
      for (int64_t c = lo; c < hi; c += 16) {  // 16 columns a vector (a panel's tail: its own lanes)
        const __mmask16 lanes = hi - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (hi - c)) - 1);
        const __m512 add = b.empty() ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(lanes, b.data() + c - col0);
        store_bf16x16(out + (m0 + r) * width_out + c - col0, lanes,
                      _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, sums + r * PANEL + c - c0), add));
      }
    }
#endif
  };
  at::parallel_for(col0 / PANEL, (col1 + PANEL - 1) / PANEL, 1, [&](int64_t p0, int64_t p1) {
    alignas(64) float scratch[BLOCK * PANEL];
#ifdef MARS_AMX
    panels(job, scratch, p0, p1,
           [&](int64_t p, int64_t blk, const float* sums) { emit(p, blk * BLOCK, BLOCK, sums); });
#elif defined(__AVX512BF16__) || defined(MARS_WIDEN)
    panels(job, scratch, p0, p1, emit);
#endif
  });
  return y;
}
}  // namespace

namespace {
// The int8 grid's scale for a block of one column's weights (32 k, zero-padded): the smallest power of two s with
// the block's largest |w| <= 127 s (1 for a block of zeros, 0 for one with a non-finite weight: off any grid; at
// least 2^-133, bf16's smallest step). Its weights are q s, q the nearest integer to w / s (ties to even): q has at
// most 7 bits and bf16 keeps 8, so q s is a bf16 exactly, and the int8 copy of a weight on the grid is lossless.
float grid_scale(const float* v) {
  float most = 0.f;
  for (int64_t i = 0; i < DEPTH; ++i) most = std::max(most, std::fabs(v[i]));
  if (!std::isfinite(most)) return 0.f;
  if (most == 0.f) return 1.f;
  float scale = std::ldexp(1.f, std::ilogb(most / 127.f));
  while (most > 127.f * scale) scale *= 2.f;
  while (scale > std::ldexp(1.f, -133) && most <= 63.5f * scale) scale /= 2.f;
  return scale;
}

// Where pack8 puts column n's weight at input 32 b + i, in a copy of `blocks` blocks of 32 k a column: its strip's
// block, then quad i / 4 of 8 columns x 4 k
inline int64_t pack8_at(int64_t blocks, int64_t n, int64_t b, int64_t i) {
  return ((n / STRIP) * blocks + b) * STRIP_BLOCK + (i / 4) * STRIP * 4 + (n % STRIP) * 4 + i % 4;
}

// W [N, K] bf16 on the int8 grid -> [strips][k / 32][264] int8: per strip of 8 columns and block of 32 k, the weights'
// integers as [8 quads of k][8 columns][4 k] (with VNNI each + 128, an unsigned byte: SIGN), then the 8 columns'
// scale exponents (scale 2^e, e from -126 to 127); k = K rounded up to 32, columns to 8, padding weights 0. Undefined
// where a weight is off the grid, a scale out of that range, or this build has no int8 path.
at::Tensor pack8(const at::Tensor& src) {
  const int64_t N = src.size(0), K = src.size(1), blocks = (K + DEPTH - 1) / DEPTH, strips = (N + STRIP - 1) / STRIP;
  if (!MARS_INT8) return at::Tensor();
  auto out = at::zeros({strips, blocks, STRIP_BLOCK}, src.options().dtype(at::kChar));
  const c10::BFloat16* w = src.data_ptr<c10::BFloat16>();
  int8_t* d = out.data_ptr<int8_t>();
  std::atomic<bool> off{false};
  at::parallel_for(0, N, STRIP * 8, [&](int64_t n0, int64_t n1) {
    float v[DEPTH];
    for (int64_t n = n0; n < n1 && !off; ++n)
      for (int64_t b = 0; b < blocks && !off; ++b) {
        block_of(w, K, n, b, v);
        const float scale = grid_scale(v);
        const int e = scale > 0.f ? std::ilogb(scale) : 0;
        if (scale == 0.f || e < -126 || e > 127) off = true;
        int8_t* block = d + ((n / STRIP) * blocks + b) * STRIP_BLOCK;
        for (int64_t i = 0; i < DEPTH && !off; ++i) {
          const float q = std::nearbyint(v[i] / scale);
          if (q * scale != v[i]) off = true;  // off the grid: the bf16 copy serves
          d[pack8_at(blocks, n, b, i)] = static_cast<int8_t>(static_cast<int8_t>(q) ^ SIGN);
        }
        block[STRIP * DEPTH + n % STRIP] = static_cast<int8_t>(e);
      }
  });
  for (int64_t n = N; n < strips * STRIP; ++n)  // padding columns: weights 0 (w + 128 where SIGN flips), scale 1
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t i = 0; i < DEPTH; ++i)
        d[pack8_at(blocks, n, b, i)] = SIGN;
  return off ? at::Tensor() : out;
}
}  // namespace

// W [N, K] bf16 rounded onto the int8 grid (grid_scale): the weights an int8 copy holds without loss
at::Tensor grid(const at::Tensor& w) {
  check_cpu("mars_rows.grid", "the weight", w);
  TORCH_CHECK(w.dim() == 2, "mars_rows.grid: the weight has ", w.dim(), " dimensions, it needs 2 ([N, K])");
  TORCH_CHECK(w.scalar_type() == at::kBFloat16, "mars_rows.grid: the weight is ", w.scalar_type(), ", not bf16");
  auto src = w.contiguous();
  auto out = at::empty_like(src);
  const int64_t N = src.size(0), K = src.size(1);
  const c10::BFloat16* s = src.data_ptr<c10::BFloat16>();
  c10::BFloat16* d = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    float v[DEPTH];
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t b = 0; b * DEPTH < K; ++b) {
        block_of(s, K, n, b, v);
        const float scale = grid_scale(v);
        for (int64_t i = 0; i < DEPTH && b * DEPTH + i < K; ++i)  // a block off any grid (scale 0): as it was
          d[n * K + b * DEPTH + i] = c10::BFloat16(scale == 0.f ? v[i] : std::nearbyint(v[i] / scale) * scale);
      }
  });
  return out;
}

// W [N, K] bf16 -> panels [ceil(N/32)][ceil(K/32) * 16][32][2], zero-padded; or, asked for int8 where W lies on the
// int8 grid (grid()) and this build has the int8 path (AVX2, AVX512-BF16), pack8's int8 panels: half the bytes
at::Tensor pack(const at::Tensor& w, bool int8) {
  check_cpu("mars_rows.pack", "the weight", w);
  TORCH_CHECK(w.dim() == 2, "mars_rows.pack: the weight has ", w.dim(), " dimensions, it needs 2 ([N, K])");
  TORCH_CHECK(w.scalar_type() == at::kBFloat16, "mars_rows.pack: the weight is ", w.scalar_type(), ", not bf16");
  auto src = w.contiguous();
  if (int8) {
    auto narrow = pack8(src);
    if (narrow.defined()) return narrow;
  }
  const int64_t N = w.size(0), K = w.size(1), pairs = (K + DEPTH - 1) / DEPTH * (DEPTH / 2);
  auto out = at::zeros({(N + PANEL - 1) / PANEL, pairs, PANEL, 2}, w.options());
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src.data_ptr());
  uint16_t* d = reinterpret_cast<uint16_t*>(out.data_ptr());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) d[(((n / PANEL) * pairs + k / 2) * PANEL + n % PANEL) * 2 + k % 2] = s[n * K + k];
  return out;
}

// x [..., K] bf16 through packed W (n output columns) and bias [n] (or none): [..., n] bf16, each sum rounded to bf16
// once (round to nearest even, as torch rounds), the bias added in fp32 first
at::Tensor linear(const at::Tensor& x, const at::Tensor& packed, int64_t n, const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "mars_rows.linear";
  check_packed(op, packed, n);
  check_x(op, x, packed_pairs(packed));
  check_bias(op, bias, n);
  std::vector<float> b;
  if (bias.has_value()) append_bias(b, *bias);
  return product(x, packed, Columns{n, 0, n}, b);
}

namespace {
// e^x of softmax's shifted scores (x <= 0), the same steps in every lane and at every vector width: x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), e^r by its Taylor polynomial to r^6 (relative error under
// 2e-7, coefficients highest first), 2^n from the exponent bits; x clamped so 2^n stays a normal float
constexpr float EXP_FLOOR = -87.f, LOG2E = 1.44269504f, LN2_HIGH = 0.693145751953125f, LN2_LOW = 1.42860677e-6f;
constexpr float TAYLOR[] = {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};

// The keys a row sees (`visible`, in slot order) into rows, then the first key again up to a whole number of `lanes`:
// {keys seen, that whole number}
template <typename T>
std::pair<int64_t, int64_t> seen_keys(const bool* visible, const T* keys, int64_t slots, int64_t d, int64_t lanes,
                                      const T** rows) {
  int64_t n = 0;
  for (int64_t t = 0; t < slots; ++t)
    if (visible[t]) rows[n++] = keys + t * d;
  const int64_t whole = (n + lanes - 1) / lanes * lanes;
  for (int64_t e = n; e < whole; ++e) rows[e] = keys;
  return {n, whole};
}
}  // namespace

#ifdef __AVX512F__
namespace {
// 16 values as fp32 (bf16 is fp32's upper half: exact)
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const c10::BFloat16* x) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// 16 fp32 stored as T (bf16: rounded as c10::BFloat16(float) rounds, store_bf16x16)
inline void store16(float* out, __m512 f) { _mm512_storeu_ps(out, f); }
inline void store16(c10::BFloat16* out, __m512 f) { store_bf16x16(out, 0xFFFF, f); }

// q . key for H query heads (q: vecs vectors a head), each one chain of fused multiply-adds over d in order, q[0]
// key[0] first; the key's vectors loaded once for them all: sums[h] holds head h's 16 partial sums.
template <int H, typename T>
inline void key_dots(const __m512* q, const T* key, int64_t vecs, __m512* sums) {
  const __m512 first = load16(key);
  for (int h = 0; h < H; ++h) sums[h] = _mm512_mul_ps(q[h * vecs], first);
  for (int64_t j = 1; j < vecs; ++j) {
    const __m512 kj = load16(key + 16 * j);
    for (int h = 0; h < H; ++h) sums[h] = _mm512_fmadd_ps(q[h * vecs + j], kj, sums[h]);
  }
}

// The 16 keys' dots from their partial sums v[16]: each key's 16 lanes summed by the tree _mm512_reduce_add_ps uses
// (lanes i and i+8, then i+4, i+2, i+1), done for the 16 keys together (two shuffles and an add a step rather than a
// reduction a key); key e's dot in lane e.
inline __m512 reduce16(const __m512* v) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i)  // lanes i + i+8: [key 2i, key 2i+1], 8 lanes each
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // + i+4: one 128-bit block a key, keys 4i .. 4i+3
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)  // + i+2: block b holds keys 8i+b and 8i+4+b, two lanes each
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44), _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
  // + i+1: lane 4b + c holds key b + 4c; put key k in lane k
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}

// e^x for 16 of softmax's shifted scores (the steps above EXP_FLOOR). Every score goes through these same lanes' steps.
inline __m512 exp_shifted16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(EXP_FLOOR));
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(LOG2E), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LOW), _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HIGH), x));
  __m512 p = _mm512_set1_ps(TAYLOR[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TAYLOR[i]));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// What a pass over one row's query heads of one key head reads: the keys and values the row sees, and the call's
// shapes
template <typename T>
struct HeadPass {
  const T* const* rows;  // the keys the row sees, in slot order, then to `whole` the first key again
  const T* keys;         // the key head's keys (a seen key's offset from here is its value's from `values`)
  const T* values;       // the key head's values
  int64_t n;             // the keys the row sees
  int64_t whole;         // n rounded up to 16
  int64_t vecs;          // vectors of 16 a head (d / 16)
  int64_t padded;        // a head's scores' stride in score: the slots rounded up to 16
  int64_t d;             // values a head (out's stride from head to head)
  float scale;           // the factor on q . key
};

// Scores q . key * scale of H query heads (q: their vecs vectors each) over the keys `rows` points at (in slot order,
// whole 16 of them): score[h * padded + e]. Each key's vectors are loaded once for the H heads.
template <int H, typename T>
void head_scores(const HeadPass<T>& pass, const __m512* q, float* score) {
  const T* const* rows = pass.rows;
  const int64_t whole = pass.whole, vecs = pass.vecs, padded = pass.padded;
  const float scale = pass.scale;
  for (int64_t e = 0; e < whole; e += 16) {
    __m512 dots[H][16], sums[H];
    for (int key = 0; key < 16; ++key) {
      key_dots<H>(q, rows[e + key], vecs, sums);
      for (int h = 0; h < H; ++h) dots[h][key] = sums[h];
    }
    for (int h = 0; h < H; ++h)
      _mm512_storeu_ps(score + h * padded + e, _mm512_mul_ps(reduce16(dots[h]), _mm512_set1_ps(scale)));
  }
}

// softmax's numerators in place, e^(x - max) over each head's n seen scores (the max of none: 0), and 1 / their sum,
// summed in slot order (the H heads' chains side by side): inv[h], 0 where the sum is 0.
template <int H>
void head_softmax(float* score, int64_t n, int64_t whole, int64_t padded, float* inv) {
  for (int h = 0; h < H; ++h) {
    float* x = score + h * padded;
    __m512 most = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t e = 0; e < n; e += 16)
      most = _mm512_mask_max_ps(most, static_cast<__mmask16>(n - e >= 16 ? 0xFFFF : (1u << (n - e)) - 1), most,
                                _mm512_loadu_ps(x + e));
    const float top = n ? _mm512_reduce_max_ps(most) : 0.f;
    for (int64_t e = 0; e < whole; e += 16)
      _mm512_storeu_ps(x + e, exp_shifted16(_mm512_sub_ps(_mm512_loadu_ps(x + e), _mm512_set1_ps(top))));
  }
  float sum[H] = {};
  for (int64_t e = 0; e < n; ++e)
    for (int h = 0; h < H; ++h) sum[h] += score[h * padded + e];
  for (int h = 0; h < H; ++h) inv[h] = sum[h] > 0.f ? 1.f / sum[h] : 0.f;
}

// out[h * d ..] = inv[h] * sum_e score[h][e] v_e over the n seen values (at the same offsets from `values` as the keys
// from `keys`): four vectors of each head at once, each one chain over the values in slot order (a head of fewer
// vectors: the last one again), each value's vectors loaded once for the H heads.
template <int H, typename T>
void head_outputs(const HeadPass<T>& pass, const float* score, const float* inv, T* out) {
  const T *const *rows = pass.rows, *keys = pass.keys, *values = pass.values;
  const int64_t n = pass.n, vecs = pass.vecs, padded = pass.padded, d = pass.d;
  for (int64_t j0 = 0; j0 < vecs; j0 += 4) {
    int64_t at[4];
    for (int u = 0; u < 4; ++u) at[u] = 16 * std::min(j0 + u, vecs - 1);
    __m512 acc[H][4];
    for (int h = 0; h < H; ++h)
      for (int u = 0; u < 4; ++u) acc[h][u] = _mm512_setzero_ps();
    for (int64_t e = 0; e < n; ++e) {
      const T* row = values + (rows[e] - keys);
      __m512 vals[4];
      for (int u = 0; u < 4; ++u) vals[u] = load16(row + at[u]);
      for (int h = 0; h < H; ++h) {
        const __m512 weight = _mm512_set1_ps(score[h * padded + e]);
        for (int u = 0; u < 4; ++u) acc[h][u] = _mm512_fmadd_ps(weight, vals[u], acc[h][u]);
      }
    }
    // acc indexed by constants only and stored without a buffer on the stack: it stays in registers (indexed by a
    // runtime bound, or beside a buffer, GCC kept it in memory and stored all H * 4 sums at every value)
    for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u)
        if (j0 + u < vecs) store16(out + h * d + 16 * (j0 + u), _mm512_mul_ps(acc[h][u], _mm512_set1_ps(inv[h])));
  }
}

// One row's attention for H query heads of one key head over the n keys it sees (rows: in slot order, padded to
// `whole`, n rounded up to 16, with the first key); out: head h's d values at out + h * d. Each head's numbers are
// those it gets alone: its scores one chain over d a key, its softmax over its own scores, its output one chain a
// vector over the seen values in slot order; the H heads only share the loads of the keys and values they read.
// score: H * padded floats.
template <int H, typename T>
void heads_pass(const HeadPass<T>& pass, const __m512* q, float* score, T* out) {
  float inv[H];
  head_scores<H>(pass, q, score);
  head_softmax<H>(score, pass.n, pass.whole, pass.padded, inv);
  head_outputs<H>(pass, score, inv, out);
}

constexpr int64_t HEADS = 4;  // the most query heads of one key head a pass computes together

template <typename T>
void attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, float scale,
            at::Tensor& out) {
  const int64_t b = q.size(0), hq = q.size(1), w = q.size(2), d = q.size(3), hkv = k.size(1), slots = k.size(2);
  const int64_t group = hq / hkv, vecs = d / 16;  // query heads that read one key head; vectors of a head
  const int64_t padded = (slots + 15) / 16 * 16;  // scores in whole vectors of 16 (the tail's lanes unused)
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  const bool* mp = mask.data_ptr<bool>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, b * w * hkv, 1, [&](int64_t i0, int64_t i1) {  // a unit: one row's query heads of a key head
    std::vector<__m512> qv(group * vecs);
    std::vector<float> score(HEADS * padded);
    std::vector<const T*> rows(padded);  // the keys this row sees, in slot order (the tail: the first key again)
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / (w * hkv), r = i / hkv % w, kh = i % hkv;
      const T *keys = kp + (s * hkv + kh) * slots * d, *values = vp + (s * hkv + kh) * slots * d;
      const auto [n, whole] = seen_keys(mp + (s * w + r) * slots, keys, slots, d, 16, rows.data());
      for (int64_t g = 0; g < group; ++g)
        for (int64_t j = 0; j < vecs; ++j) qv[g * vecs + j] = load16(qp + ((s * hq + kh * group + g) * w + r) * d + 16 * j);
      T* o = op + ((s * w + r) * hq + kh * group) * d;
      const HeadPass<T> seen{rows.data(), keys, values, n, whole, vecs, padded, d, scale};  // what each pass reads
      for (int64_t g0 = 0; g0 < group; g0 += HEADS) {  // HEADS heads a pass, the rest in a last pass
        const __m512* qg = qv.data() + g0 * vecs;
        const auto pass = std::min(HEADS, group - g0);
        auto run = [&](auto heads) {
          heads_pass<decltype(heads)::value>(seen, qg, score.data(), o + g0 * d);
        };
        if (pass == 4) run(std::integral_constant<int, 4>{});
        else if (pass == 3) run(std::integral_constant<int, 3>{});
        else if (pass == 2) run(std::integral_constant<int, 2>{});
        else run(std::integral_constant<int, 1>{});
      }
    }
  });
}
}  // namespace
#elif defined(__AVX2__) && defined(__FMA__)
namespace {
// 8 values as fp32 (bf16 is fp32's upper half: exact)
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const c10::BFloat16* x) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// 8 fp32 stored as T (bf16: rounded as c10::BFloat16(float) rounds, store_bf16x8)
inline void store8(float* out, __m256 f) { _mm256_storeu_ps(out, f); }
inline void store8(c10::BFloat16* out, __m256 f) { store_bf16x8(out, f); }

// The 8 keys' dots from their partial sums v[8]: key e's 8 lanes summed ((0+1)+(2+3))+((4+5)+(6+7)), into lane e
inline __m256 reduce8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // lane e (e < 4): key e's lanes 0-3, 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// e^x for 8 of softmax's shifted scores (the steps above EXP_FLOOR, as exp_shifted16's on AVX-512)
inline __m256 exp_shifted8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(EXP_FLOOR));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), _mm256_set1_ps(0.5f)));
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LOW), _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HIGH), x));
  __m256 p = _mm256_set1_ps(TAYLOR[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TAYLOR[i]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// What one query head of one row reads: the keys it sees (slot order, then to `whole` the first key again), where
// the values are, and the shapes
template <typename T>
struct SeenKeys {
  const T* const* rows;  // the seen keys, in slot order, padded to `whole` with the first
  const T* keys;         // the key head's keys (a seen key's offset from here is its value's from `values`)
  const T* values;       // the key head's values
  int64_t n, whole, d;   // keys seen, n rounded up to 8, values a head
  float scale;           // the factor on q . key
};

// One query head's attention over its seen keys: scores (each one chain over d a key, 8 keys side by side), softmax
// (max, e^(x - max), their sum in slot order), out = sum_e p_e v_e (one chain a vector of 8 over the values in slot
// order) / the sum. q: d / 8 vectors; score: whole floats.
template <typename T>
void head_attend(const SeenKeys<T>& seen, const __m256* q, float* score, T* out) {
  const int64_t vecs = seen.d / 8, n = seen.n;
  for (int64_t e = 0; e < seen.whole; e += 8) {
    __m256 sums[8];
    for (int key = 0; key < 8; ++key) {
      const T* row = seen.rows[e + key];
      sums[key] = _mm256_mul_ps(q[0], load8(row));
      for (int64_t j = 1; j < vecs; ++j) sums[key] = _mm256_fmadd_ps(q[j], load8(row + 8 * j), sums[key]);
    }
    _mm256_storeu_ps(score + e, _mm256_mul_ps(reduce8(sums), _mm256_set1_ps(seen.scale)));
  }
  float top = n ? score[0] : 0.f;
  for (int64_t e = 1; e < n; ++e) top = std::max(top, score[e]);
  for (int64_t e = 0; e < seen.whole; e += 8)
    _mm256_storeu_ps(score + e, exp_shifted8(_mm256_sub_ps(_mm256_loadu_ps(score + e), _mm256_set1_ps(top))));
  float sum = 0.f;
  for (int64_t e = 0; e < n; ++e) sum += score[e];
  const __m256 inv = _mm256_set1_ps(sum > 0.f ? 1.f / sum : 0.f);
  for (int64_t j0 = 0; j0 < vecs; j0 += 4) {
    int64_t at[4];
    for (int u = 0; u < 4; ++u) at[u] = 8 * std::min(j0 + u, vecs - 1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t e = 0; e < n; ++e) {
      const T* row = seen.values + (seen.rows[e] - seen.keys);
      const __m256 weight = _mm256_set1_ps(score[e]);
      for (int u = 0; u < 4; ++u) acc[u] = _mm256_fmadd_ps(weight, load8(row + at[u]), acc[u]);
    }
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u)  // acc by constants, no buffer: it stays in registers (head_outputs)
      if (j0 + u < vecs) store8(out + 8 * (j0 + u), _mm256_mul_ps(acc[u], inv));
  }
}

template <typename T>
void attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, float scale,
            at::Tensor& out) {
  const int64_t b = q.size(0), hq = q.size(1), w = q.size(2), d = q.size(3), hkv = k.size(1), slots = k.size(2);
  const int64_t group = hq / hkv, vecs = d / 8, padded = (slots + 7) / 8 * 8;
  const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>();
  const bool* mp = mask.data_ptr<bool>();
  T* op = out.data_ptr<T>();
  at::parallel_for(0, b * w * hkv, 1, [&](int64_t i0, int64_t i1) {  // a unit: one row's query heads of a key head
    std::vector<__m256> qv(vecs);
    std::vector<float> score(padded);
    std::vector<const T*> rows(padded);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / (w * hkv), r = i / hkv % w, kh = i % hkv;
      const T *keys = kp + (s * hkv + kh) * slots * d, *values = vp + (s * hkv + kh) * slots * d;
      const auto [n, whole] = seen_keys(mp + (s * w + r) * slots, keys, slots, d, 8, rows.data());
      const SeenKeys<T> seen{rows.data(), keys, values, n, whole, d, scale};
      for (int64_t g = 0; g < group; ++g) {
        const T* qh = qp + ((s * hq + kh * group + g) * w + r) * d;
        for (int64_t j = 0; j < vecs; ++j) qv[j] = load8(qh + 8 * j);
        head_attend(seen, qv.data(), score.data(), op + ((s * w + r) * hq + kh * group + g) * d);
      }
    }
  });
}
}  // namespace
#else
namespace {
template <typename T>
void attend(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, float, at::Tensor&) {
  TORCH_CHECK(false, "mars_rows.attention: built without AVX-512 or AVX2");
}
}  // namespace
#endif

// softmax(q k^T * scale, where mask) v, each row of each head on its own, its keys in slot order: q [b, Hq, w, d],
// k and v [b, Hkv, T, d] (query head h reads key head h / (Hq / Hkv)), mask bool [b, 1, w, T] (True = attend; any
// of its dimensions 1 is broadcast); returns [b, w, Hq, d]. A row's bits depend on its own query and the keys it sees,
// nothing else.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     double scale) {
  constexpr const char* op = "mars_rows.attention";
  check_cpu(op, "q", q);
  check_cpu(op, "k", k);
  check_cpu(op, "v", v);
  check_cpu(op, "mask", mask);
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k and v have ", q.dim(), ", ", k.dim(), " and ",
              v.dim(), " dimensions, each needs 4 (q [b, Hq, w, d], k and v [b, Hkv, T, d])");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && v.scalar_type() == k.scalar_type(), op, ": q, k and v are ",
              q.scalar_type(), ", ", k.scalar_type(), " and ", v.scalar_type(), ", not one dtype");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kFloat, op, ": q, k and v are ",
              q.scalar_type(), ", bf16 or fp32 only");
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k has shape ", k.sizes(), ", v ", v.sizes(), ", not the same");
  TORCH_CHECK(q.size(0) == k.size(0), op, ": q has a batch of ", q.size(0), ", k and v ", k.size(0));
  TORCH_CHECK(q.size(3) == k.size(3), op, ": q's heads have ", q.size(3), " values, k's and v's ", k.size(3));
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": q's ", q.size(1),
              " heads are not a multiple of k's and v's ", k.size(1));
  TORCH_CHECK(q.size(3) > 0 && q.size(3) % 16 == 0, op, ": a head's size must be a multiple of 16, not ", q.size(3));
  TORCH_CHECK(mask.scalar_type() == at::kBool, op, ": mask is ", mask.scalar_type(), ", not bool");
  const std::array<int64_t, 4> want = {q.size(0), 1, q.size(2), k.size(2)};
  bool fits = mask.dim() == 4;
  for (int64_t i = 0; fits && i < 4; ++i) fits = mask.size(i) == want[i] || mask.size(i) == 1;
  TORCH_CHECK(fits, op, ": mask has shape ", mask.sizes(), ", it needs [b, 1, w, T] = ", at::IntArrayRef(want),
              " (a dimension 1 is broadcast)");
  auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  auto mc = mask.expand({q.size(0), 1, q.size(2), k.size(2)}).contiguous();
  auto out = at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options());
  if (q.scalar_type() == at::kBFloat16)
    attend<c10::BFloat16>(qc, kc, vc, mc, static_cast<float>(scale), out);
  else
    attend<float>(qc, kc, vc, mc, static_cast<float>(scale), out);
  return out;
}

// The packed copies a compiled graph's linear layers are answered from, by the weight's data pointer: the graph hands
// each call the model's weight (runtime/compiled.py), and routed() finds its copy here without a trip through Python.
// An entry holds the packed matrix and nothing else: a call's bias comes with the call, and no product is kept.
namespace {
struct Entry {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // the model's weight (an entry whose weight is gone is dropped)
  int64_t version;                                     // the weight's version when packed (-1: an inference tensor)
  std::array<int64_t, 4> layout;                       // the weight's sizes and strides when packed
  at::Tensor packed;                                   // the packed matrix (fused siblings: their columns side by side)
  Columns cols;                                        // the matrix's columns, and this weight's among them
};
std::mutex registry_mutex;
std::unordered_map<const void*, Entry> registry;

int64_t version_of(const at::Tensor& w) { return w.is_inference() ? -1 : static_cast<int64_t>(w._version()); }
std::array<int64_t, 4> layout_of(const at::Tensor& w) { return {w.size(0), w.size(1), w.stride(0), w.stride(1)}; }
}  // namespace

// weight [col1 - col0, K] is columns [col0, col1) of packed (a matrix of n columns): routed() answers it from there
// while it is the same tensor, unchanged
void register_weight(const at::Tensor& weight, const at::Tensor& packed, int64_t n, int64_t col0, int64_t col1) {
  constexpr const char* op = "mars_rows.register";
  check_cpu(op, "the weight", weight);
  TORCH_CHECK(weight.dim() == 2, op, ": the weight has ", weight.dim(), " dimensions, it needs 2 ([N, K])");
  TORCH_CHECK(weight.scalar_type() == at::kBFloat16, op, ": the weight is ", weight.scalar_type(), ", not bf16");
  check_packed(op, packed, n);
  const int64_t K = weight.size(1), pairs = packed_pairs(packed);
  TORCH_CHECK((K + DEPTH - 1) / DEPTH * (DEPTH / 2) == pairs, op, ": the weight has ", K,
              " in-features, the packed matrix ", std::max<int64_t>(0, pairs * 2 - DEPTH + 1), " to ", pairs * 2);
  TORCH_CHECK(0 <= col0 && col0 < col1 && col1 <= n, op, ": columns [", col0, ", ", col1,
              ") are not a range within the packed matrix's ", n);
  TORCH_CHECK(col1 - col0 == weight.size(0), op, ": columns [", col0, ", ", col1, ") are ", col1 - col0,
              ", the weight has ", weight.size(0), " output columns");
  std::lock_guard<std::mutex> hold(registry_mutex);
  for (auto it = registry.begin(); it != registry.end();) it = it->second.storage.expired() ? registry.erase(it) : ++it;
  registry.insert_or_assign(weight.data_ptr(), Entry{weight.storage().getWeakStorageImpl(), version_of(weight),
                                                     layout_of(weight), packed, Columns{n, col0, col1}});
}

// The rows the forward running in this thread feeds (feeding()): a decoding forward pads every sample to the widest
// one's columns, and the linear layers' work is by row, so only fed rows need computing. A row's bits are its own
// whatever else shares the call, so a fed row gets the same bits; an unfed row's outputs are 0, and decide nothing
// (no fed column sees an unfed one, the cache slots unfed columns are written to are never seen, and what decoders
// read at unfed columns is held, as a finished sample's or a group it did not feed). Not nested: one forward at a
// time in a thread, its setting cleared after it.
namespace {
struct Fed {
  int64_t rows = 0;  // the forward's rows (batch x width): a call of another row count computes every row
  at::Tensor index;  // the fed rows among them, ascending (int64); undefined: none set, every row computed
};
thread_local Fed fed_rows;
}  // namespace

// From now on in this thread, routed and routed_siblings calls of fed's numel() rows compute only the rows where fed
// (bool, any shape: read flat) is true, the others 0; none: every row (what a forward sets before it and clears after)
void feeding(const std::optional<at::Tensor>& fed) {
  constexpr const char* op = "mars_rows.feeding";
  if (!fed.has_value()) {
    fed_rows = Fed{};
    return;
  }
  check_cpu(op, "fed", *fed);
  TORCH_CHECK(fed->scalar_type() == at::kBool, op, ": fed is ", fed->scalar_type(), ", it needs bool");
  const auto flat = fed->reshape({-1});
  fed_rows = Fed{flat.numel(), at::nonzero(flat).reshape({-1})};
}

namespace {
// product() of x's fed rows only (feeding()), each at its own place in the output, the unfed ones 0; every row where
// no fed rows are set for this row count, or all of them are fed
at::Tensor fed_product(const at::Tensor& x, const at::Tensor& packed, Columns cols, const std::vector<float>& b) {
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0;
  const Fed& fed = fed_rows;
  if (!fed.index.defined() || fed.rows != M || fed.index.numel() == M) return product(x, packed, cols, b);
  auto sizes = x.sizes().vec();
  sizes.back() = cols.col1 - cols.col0;
  auto y = at::zeros({M, sizes.back()}, x.options());
  if (fed.index.numel() > 0)
    y.index_copy_(0, fed.index, product(x.reshape({M, K}).index_select(0, fed.index), packed, cols, b));
  return y.view(sizes);
}

// weight's registered entry where it answers x W^T (no grad, bf16, the same weight, of the same sizes and strides,
// unchanged since it was packed)
std::optional<Entry> serving(const at::Tensor& x, const at::Tensor& weight) {
  std::optional<Entry> entry;
  if (!weight.has_storage() || weight.dim() != 2) return entry;
  {
    std::lock_guard<std::mutex> hold(registry_mutex);
    auto it = registry.find(weight.data_ptr());
    if (it != registry.end()) entry = it->second;
  }
  const bool serves = entry && !at::GradMode::is_enabled() && x.scalar_type() == at::kBFloat16 &&
                      weight.scalar_type() == at::kBFloat16 && x.device().is_cpu() &&
                      entry->storage.lock().get() == weight.storage().unsafeGetStorageImpl() &&
                      entry->version == version_of(weight) && entry->layout == layout_of(weight);
  return serves ? entry : std::nullopt;
}

// x W^T + bias from W's entry (its columns of the packed matrix only), the bias the call's
at::Tensor served(const char* op, const at::Tensor& x, const Entry& entry, const std::optional<at::Tensor>& bias) {
  const int64_t K = entry.layout[1], cols = entry.cols.col1 - entry.cols.col0;
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == K, op, ": x has ", x.dim() ? x.size(-1) : 0,
              " values a row, the weight has ", K, " in-features");
  check_bias(op, bias, cols);
  std::vector<float> b;
  if (bias.has_value()) append_bias(b, *bias);
  return fed_product(x, entry.packed, entry.cols, b);
}
}  // namespace

// F.linear(x, weight, bias), answered from weight's registered packed copy where one serves (only the panels of its
// columns computed), else by torch's F.linear
at::Tensor routed(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "mars_rows.routed";
  check_cpu(op, "x", x);
  check_cpu(op, "the weight", weight);
  if (bias.has_value()) check_cpu(op, "bias", *bias);
  const auto entry = serving(x, weight);
  return entry ? served(op, x, *entry, bias) : at::linear(x, weight, bias);
}

// F.linear(x, weights[i], biases[i]) for every i, side by side ([..., sum of their columns]): one call of the kernel
// where the weights are, in this order, the columns of one packed matrix (siblings fused by runtime/linear.py) and
// the biases all given (concatenated, in order) or all none, else one routed call each. The compiled graph reads each
// sibling's columns as a view (no copy, no call of its own).
at::Tensor routed_siblings(const at::Tensor& x, at::TensorList weights,
                           const c10::List<std::optional<at::Tensor>>& biases) {
  constexpr const char* op = "mars_rows.routed_siblings";
  TORCH_CHECK(!weights.empty(), op, ": no weights");
  TORCH_CHECK(weights.size() == biases.size(), op, ": ", weights.size(), " weights and ", biases.size(),
              " biases, it needs one bias (or None) a weight");
  check_cpu(op, "x", x);
  TORCH_CHECK(x.dim() >= 1, op, ": x has no dimensions, it needs [..., K]");
  size_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto name = c10::str("weights[", i, "]");
    check_cpu(op, name.c_str(), weights[i]);
    TORCH_CHECK(weights[i].dim() == 2 && weights[i].size(1) == x.size(-1), op, ": ", name, " has shape ",
                weights[i].sizes(), ", it needs [N, ", x.size(-1), "] (x has ", x.size(-1), " values a row)");
    const std::optional<at::Tensor> bias = biases.get(i);
    if (bias.has_value()) {
      check_cpu(op, c10::str("biases[", i, "]").c_str(), *bias);
      ++given;
    }
  }
  std::optional<Entry> first = serving(x, weights[0]);
  bool whole = first && first->cols.col0 == 0 && (given == 0 || given == weights.size());
  int64_t col = 0;
  for (size_t i = 0; whole && i < weights.size(); ++i) {
    const auto entry = i == 0 ? first : serving(x, weights[i]);
    whole = entry && entry->packed.is_same(first->packed) && entry->cols.n == first->cols.n &&
            entry->cols.col0 == col;
    if (whole) col = entry->cols.col1;
  }
  if (whole && col == first->cols.n) {
    std::vector<float> b;  // the call's biases in fp32, in order (all none: none)
    for (size_t i = 0; given && i < weights.size(); ++i) {
      const std::optional<at::Tensor> bias = biases.get(i);
      check_bias(op, bias, weights[i].size(0));
      append_bias(b, *bias);
    }
    return fed_product(x, first->packed, Columns{col, 0, col}, b);
  }
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i < weights.size(); ++i) parts.push_back(routed(x, weights[i], biases.get(i)));
  return at::cat(parts, -1);
}

// Seconds this thread has spent in the linear layers' products since the kernel loaded (the weights' stream and the
// multiplies, the other threads' share waited for): mars-bench sets it beside a forward's time
double linear_seconds() { return product_seconds; }

TORCH_LIBRARY(mars_rows, m) {
  m.def("available() -> bool", available);
  m.def("flavor() -> str", flavor);
  m.def("pack(Tensor w, bool int8=True) -> Tensor");
  m.def("grid(Tensor w) -> Tensor");
  m.def("int8_path() -> bool", []() { return MARS_INT8; });
  m.def("linear(Tensor x, Tensor packed, int n, Tensor? bias) -> Tensor");
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor mask, float scale) -> Tensor");
  m.def("register(Tensor weight, Tensor packed, int n, int col0, int col1) -> ()");
  m.def("routed(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("routed_siblings(Tensor x, Tensor[] weights, Tensor?[] biases) -> Tensor");
  m.def("feeding(Tensor? fed) -> ()", feeding);  // called around a forward, never traced
  m.def("linear_seconds() -> float", linear_seconds);  // read beside forwards, never traced
}
// Every tensor op's kernel takes tensors of any device (CompositeExplicitAutograd), so that one on another device is
// refused by the op's checks, not by the dispatcher; rows.py's fakes stand for routed, routed_siblings and attention
// on meta tensors (a compiled graph's tracing), and refuse real meta tensors the same way.
TORCH_LIBRARY_IMPL(mars_rows, CompositeExplicitAutograd, m) {
  m.impl("pack", pack);
  m.impl("grid", grid);
  m.impl("linear", linear);
  m.impl("attention", attention);
  m.impl("register", register_weight);
  m.impl("routed", routed);
  m.impl("routed_siblings", routed_siblings);
}
