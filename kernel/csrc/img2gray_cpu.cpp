#include "img2gray_cpu.h"
#include "img2gray_pixel.h"

void img2gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t n_pixels) {
  for (int64_t i = 0; i < n_pixels; ++i) {
    gray[i] = img2gray_pixel(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
  }
}
