/* A DPU kernel must not use floating point: this one must fail to build. */
#include <stdint.h>
#include <defs.h>
__host uint32_t out;
int main(void)
{
    float x = 1.5f;
    out = (uint32_t)(x * (float)me());
    return 0;
}
