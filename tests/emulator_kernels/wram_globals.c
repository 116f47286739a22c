/* Globals that, with 16 tasklets' stacks, do not fit the 64 KB of WRAM: dpu_load refuses. */
#include <stdint.h>
#include <defs.h>
__host uint8_t table[60000];
int main(void)
{
    table[me()] = 1;
    return 0;
}
