// Launch settings of the img2gray CUDA kernel against a device copy of the same
// bytes, on one GPU, in one process: the exploration behind the settings in
// csrc/img2gray_cuda.cu (which this file includes, so the production kernel
// and launch are measured as they are).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -I kernel/csrc -Xcompiler -ffp-contract=off \
//       kernel/benchmarks/img2gray_variants.cu -o /tmp/variants && /tmp/variants [csv] [--ncu]
//
// Every variant is first checked bit for bit on all 2^24 RGB triples (against
// img2gray_pixel() on the host), on odd pixel counts, and against the old
// kernel on a random image. Times (CUDA events; median of 3 rounds, each round
// every variant in turn, each after ~100 ms of warm-up calls, each the median
// of 5 repeats):
//   b2b:     N launches back to back between two events, / N (the buffers stay
//            in L2 when they fit: 60 MB on the H200; so does the copy's);
//   cold:    the same, rotating over enough buffer sets that none is in L2;
//   flushed: as triton's do_bench, a memset of 4x the L2 before each call, and
//            each call between its own two events.
// GB/s counts 4 bytes per pixel (3 read, 1 written); the copy moves 2 bytes a
// pixel from one buffer to another: the same 4 bytes of traffic.
// --ncu: one launch of each variant at 16384x16384 only, for Nsight Compute.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../csrc/img2gray_cuda.cu"

#define CHECK(call)                                                                             \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace old_kernel {
// The kernel as it was before issue 15 (I2F/F2I conversions, 8 blocks per SM,
// grid-stride, streaming hints), kept here as the baseline.
__device__ __forceinline__ uint32_t byte_of(uint32_t word, int index) { return (word >> (8 * index)) & 0xFFu; }
__device__ __forceinline__ uint32_t gray4(uint32_t w0, uint32_t w1, uint32_t w2) {
  const uint32_t p0 = img2gray_pixel(byte_of(w0, 0), byte_of(w0, 1), byte_of(w0, 2));
  const uint32_t p1 = img2gray_pixel(byte_of(w0, 3), byte_of(w1, 0), byte_of(w1, 1));
  const uint32_t p2 = img2gray_pixel(byte_of(w1, 2), byte_of(w1, 3), byte_of(w2, 0));
  const uint32_t p3 = img2gray_pixel(byte_of(w2, 1), byte_of(w2, 2), byte_of(w2, 3));
  return p0 | (p1 << 8) | (p2 << 16) | (p3 << 24);
}
__global__ void __launch_bounds__(256) vectorized(const uint4* __restrict__ rgb, uint4* __restrict__ gray, int64_t n) {
  const int64_t n_groups = n / 16;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t group = first; group < n_groups; group += stride) {
    const uint4 a = __ldcs(rgb + 3 * group);
    const uint4 b = __ldcs(rgb + 3 * group + 1);
    const uint4 c = __ldcs(rgb + 3 * group + 2);
    uint4 out;
    out.x = gray4(a.x, a.y, a.z);
    out.y = gray4(a.w, b.x, b.y);
    out.z = gray4(b.z, b.w, c.x);
    out.w = gray4(c.y, c.z, c.w);
    __stcs(gray + group, out);
  }
  const int64_t tail = n - n_groups * 16;
  if (first < tail) {
    const int64_t i = n_groups * 16 + first;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(rgb) + 3 * i;
    reinterpret_cast<uint8_t*>(gray)[i] = img2gray_pixel(p[0], p[1], p[2]);
  }
}
}  // namespace old_kernel

static int g_sms = 0;

using Launch = std::function<void(const uint8_t*, uint8_t*, int64_t, cudaStream_t)>;

struct Variant {
  std::string name;
  Launch launch;
};

// blocks_per_sm == 0: one block per tile (grid from the size); else a
// grid-stride grid of blocks_per_sm * SMs blocks.
template <int U, bool S>
Variant groups_variant(int blocks_per_sm) {
  std::string name = "new u" + std::to_string(U) + (S ? " cs" : " plain") +
                     (blocks_per_sm ? " grid" + std::to_string(blocks_per_sm) + "/SM" : " tiles");
  return {name, [blocks_per_sm](const uint8_t* rgb, uint8_t* gray, int64_t n, cudaStream_t s) {
            const int64_t tile = (int64_t)U * kThreadsPerBlock;
            int64_t blocks = std::max<int64_t>(1, (n / kPixelsPerGroup + tile - 1) / tile);
            if (blocks_per_sm) blocks = std::min<int64_t>(blocks, (int64_t)g_sms * blocks_per_sm);
            img2gray_groups<U, S><<<(unsigned)blocks, kThreadsPerBlock, 0, s>>>(
                reinterpret_cast<const uint4*>(rgb), reinterpret_cast<uint4*>(gray), n);
          }};
}

static std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"production", [](const uint8_t* rgb, uint8_t* gray, int64_t n, cudaStream_t s) {
                 CHECK(img2gray_cuda_launch(rgb, gray, n, s));
               }});
  v.push_back({"old (8/SM grid)", [](const uint8_t* rgb, uint8_t* gray, int64_t n, cudaStream_t s) {
                 int64_t blocks = std::min<int64_t>((int64_t)g_sms * 8, std::max<int64_t>(1, (n / 16 + 255) / 256));
                 old_kernel::vectorized<<<(unsigned)blocks, 256, 0, s>>>(reinterpret_cast<const uint4*>(rgb),
                                                                         reinterpret_cast<uint4*>(gray), n);
               }});
  // Round 1 (this file's first run on the H200) also had grid-stride grids of
  // 6, 4 and 2 blocks per SM and u4: never better than these.
  v.push_back(groups_variant<1, true>(8));
  v.push_back(groups_variant<1, true>(0));
  v.push_back(groups_variant<1, false>(0));
  v.push_back(groups_variant<2, true>(0));
  v.push_back(groups_variant<2, false>(0));
  return v;
}

struct Size {
  std::string name;
  int64_t pixels;
};

static float median(std::vector<float> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// ms per call: `calls` back-to-back launches of fn(set) between two events,
// cycling over `sets` buffer sets; median of 5.
static float time_b2b(const std::function<void(int)>& fn, int sets, int calls, cudaStream_t s) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  // Warm up for about 100 ms of calls first: the H200 ran the first kernels
  // timed after a stretch of copies up to 50% slower (round 2), however many
  // calls were timed; the clocks had to settle to this workload.
  CHECK(cudaEventRecord(a, s));
  fn(0);
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float one_ms;
  CHECK(cudaEventElapsedTime(&one_ms, a, b));
  const int warm = (int)std::min(20000.0f, std::max(3.0f, 100.0f / std::max(one_ms, 1e-3f)));
  for (int i = 0; i < warm; ++i) fn(i % sets);
  std::vector<float> t;
  for (int r = 0; r < 5; ++r) {
    CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < calls; ++i) fn(i % sets);
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / calls);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return median(t);
}

// As triton's do_bench: before each call, a memset of `flush_bytes` (4x the L2)
// evicts the buffers; each call between its own two events; the median.
static float time_flushed(const std::function<void(int)>& fn, uint8_t* flush, size_t flush_bytes, int calls,
                          cudaStream_t s) {
  std::vector<cudaEvent_t> a(calls), b(calls);
  for (int i = 0; i < calls; ++i) {
    CHECK(cudaEventCreate(&a[i]));
    CHECK(cudaEventCreate(&b[i]));
  }
  fn(0);
  for (int i = 0; i < calls; ++i) {
    CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, s));
    CHECK(cudaEventRecord(a[i], s));
    fn(0);
    CHECK(cudaEventRecord(b[i], s));
  }
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int i = 0; i < calls; ++i) {
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a[i], b[i]));
    t.push_back(ms);
    CHECK(cudaEventDestroy(a[i]));
    CHECK(cudaEventDestroy(b[i]));
  }
  return median(t);
}

static bool check_variant(const Variant& v, cudaStream_t s) {
  // All 2^24 triples, then odd counts (tails of 1..15 pixels), against the host.
  const int64_t n = 1 << 24;
  std::vector<uint8_t> rgb(3 * n), want(n), got(n);
  for (int64_t i = 0; i < n; ++i) {
    rgb[3 * i] = (uint8_t)(i >> 16), rgb[3 * i + 1] = (uint8_t)(i >> 8), rgb[3 * i + 2] = (uint8_t)i;
    want[i] = img2gray_pixel(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
  }
  uint8_t *d_rgb, *d_gray;
  CHECK(cudaMalloc(&d_rgb, 3 * n));
  CHECK(cudaMalloc(&d_gray, n));
  CHECK(cudaMemcpy(d_rgb, rgb.data(), 3 * n, cudaMemcpyHostToDevice));
  bool ok = true;
  // Everything on stream s (non-blocking: the legacy default stream does not order it).
  for (int64_t count : {n, (int64_t)1, (int64_t)15, (int64_t)17, (int64_t)4099, n - 1, (int64_t)123457}) {
    CHECK(cudaMemsetAsync(d_gray, 0xA5, n, s));
    v.launch(d_rgb, d_gray, count, s);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(got.data(), d_gray, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    if (std::memcmp(got.data(), want.data(), count) != 0) {
      std::printf("WRONG %s at %lld pixels\n", v.name.c_str(), (long long)count);
      ok = false;
    }
    if (count < n && got[count] != 0xA5) {
      std::printf("WRONG %s wrote past %lld pixels\n", v.name.c_str(), (long long)count);
      ok = false;
    }
  }
  CHECK(cudaFree(d_rgb));
  CHECK(cudaFree(d_gray));
  return ok;
}

int main(int argc, char** argv) {
  const char* csv_path = argc > 1 && argv[1][0] != '-' ? argv[1] : nullptr;
  bool ncu = false;
  for (int i = 1; i < argc; ++i) ncu |= std::strcmp(argv[i], "--ncu") == 0;
  CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const auto vs = variants();

  if (ncu) {  // one launch each at 16384^2 (plus the copy), random data
    const int64_t n = 16384LL * 16384;
    uint8_t *rgb, *gray, *src, *dst;
    CHECK(cudaMalloc(&rgb, 3 * n));
    CHECK(cudaMalloc(&gray, n));
    CHECK(cudaMalloc(&src, 2 * n));
    CHECK(cudaMalloc(&dst, 2 * n));
    CHECK(cudaMemset(rgb, 0x5A, 3 * n));
    for (const auto& v : vs) v.launch(rgb, gray, n, s);
    CHECK(cudaMemcpyAsync(dst, src, 2 * n, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    return 0;
  }

  bool all_ok = true;
  for (const auto& v : vs) all_ok &= check_variant(v, s);
  std::printf("%s, %d SMs, L2 %d MB: every variant %s\n", prop.name, g_sms, prop.l2CacheSize >> 20,
              all_ok ? "bit-exact on all 2^24 triples and odd sizes" : "NOT EXACT (see above)");

  const std::vector<Size> sizes = {{"1080x1920", 1080LL * 1920},
                                   {"2160x3840", 2160LL * 3840},
                                   {"4320x7680", 4320LL * 7680},
                                   {"64x512x512", 64LL * 512 * 512},
                                   {"16384x16384", 16384LL * 16384}};
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "size,impl,mode,us,GB/s,pct_of_copy\n");
  const size_t flush_bytes = 4 * (size_t)prop.l2CacheSize;
  uint8_t* flush;
  CHECK(cudaMalloc(&flush, flush_bytes));
  const char* mode_names[3] = {"b2b", "cold", "flushed"};
  std::mt19937 rng(1);
  for (const auto& size : sizes) {
    const int64_t n = size.pixels;
    // Enough sets that a rotation moves well over twice the L2 ("cold").
    const int cold_sets = (int)std::min<int64_t>(16, std::max<int64_t>(2, (4LL * prop.l2CacheSize) / (4 * n) + 1));
    std::vector<uint8_t*> rgb(cold_sets), gray(cold_sets), src(cold_sets), dst(cold_sets);
    std::vector<uint8_t> host(3 * n);
    for (auto& x : host) x = (uint8_t)rng();
    for (int i = 0; i < cold_sets; ++i) {
      CHECK(cudaMalloc(&rgb[i], 3 * n));
      CHECK(cudaMalloc(&gray[i], n));
      CHECK(cudaMalloc(&src[i], 2 * n));
      CHECK(cudaMalloc(&dst[i], 2 * n));
      CHECK(cudaMemcpy(rgb[i], host.data(), 3 * n, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(src[i], host.data(), 2 * n, cudaMemcpyHostToDevice));
    }
    // Same output as the old kernel on this random image.
    std::vector<uint8_t> ref(n), got(n);
    for (size_t k = 0; k < vs.size(); ++k) {
      CHECK(cudaMemsetAsync(gray[0], 0xA5, n, s));
      vs[k].launch(rgb[0], gray[0], n, s);
      CHECK(cudaMemcpyAsync(k == 0 ? ref.data() : got.data(), gray[0], n, cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      if (k > 0 && std::memcmp(ref.data(), got.data(), n) != 0) {
        std::printf("WRONG %s differs from production at %s\n", vs[k].name.c_str(), size.name.c_str());
        all_ok = false;
      }
    }
    const int calls = (int)std::max<int64_t>(20, std::min<int64_t>(400, (int64_t)4e9 / (4 * n)));
    auto gbs = [&](float ms) { return 4.0 * n / (ms * 1e-3) / 1e9; };
    // times[mode][impl] over 3 rounds, each round every impl once (copy first),
    // so a drift of the clocks spreads over all of them; reported: the median.
    const size_t impls = vs.size() + 1;
    std::vector<std::vector<std::vector<float>>> times(3, std::vector<std::vector<float>>(impls));
    for (int round = 0; round < 3; ++round) {
      for (int mode = 0; mode < 3; ++mode) {
        const int sets = mode == 1 ? cold_sets : 1;
        for (size_t k = 0; k < impls; ++k) {
          std::function<void(int)> fn;
          if (k == 0) {
            fn = [&](int i) { CHECK(cudaMemcpyAsync(dst[i], src[i], 2 * n, cudaMemcpyDeviceToDevice, s)); };
          } else {
            fn = [&, k](int i) { vs[k - 1].launch(rgb[i], gray[i], n, s); };
          }
          times[mode][k].push_back(mode == 2 ? time_flushed(fn, flush, flush_bytes, std::min(calls, 50), s)
                                             : time_b2b(fn, sets, calls, s));
        }
      }
    }
    for (int mode = 0; mode < 3; ++mode) {
      const float copy_ms = median(times[mode][0]);
      std::printf("\n%s %s (%d calls, %d buffer sets, median of 3 rounds): copy %.2f us %.0f GB/s\n",
                  size.name.c_str(), mode_names[mode], mode == 2 ? std::min(calls, 50) : calls,
                  mode == 1 ? cold_sets : 1, copy_ms * 1e3, gbs(copy_ms));
      if (csv)
        std::fprintf(csv, "%s,copy,%s,%.3f,%.1f,100.0\n", size.name.c_str(), mode_names[mode], copy_ms * 1e3,
                     gbs(copy_ms));
      for (size_t k = 1; k < impls; ++k) {
        const float ms = median(times[mode][k]);
        const auto mm = std::minmax_element(times[mode][k].begin(), times[mode][k].end());
        std::printf("  %-22s %9.2f us (%.2f-%.2f) %6.0f GB/s %6.1f%% of copy\n", vs[k - 1].name.c_str(), ms * 1e3,
                    *mm.first * 1e3, *mm.second * 1e3, gbs(ms), 100.0 * copy_ms / ms);
        if (csv)
          std::fprintf(csv, "%s,%s,%s,%.3f,%.1f,%.1f\n", size.name.c_str(), vs[k - 1].name.c_str(), mode_names[mode],
                       ms * 1e3, gbs(ms), 100.0 * copy_ms / ms);
      }
    }
    for (int i = 0; i < cold_sets; ++i) {
      CHECK(cudaFree(rgb[i]));
      CHECK(cudaFree(gray[i]));
      CHECK(cudaFree(src[i]));
      CHECK(cudaFree(dst[i]));
    }
  }
  if (csv) std::fclose(csv);
  std::printf("\n%s\n", all_ok ? "ALL EXACT" : "SOME VARIANT IS WRONG");
  return all_ok ? 0 : 1;
}
