/* plot.h - `nnc plot`: --metrics files drawn as curves (plot.c). */
#ifndef NNC_PLOT_H
#define NNC_PLOT_H
/* argv[0] is "plot"; returns the exit status. */
int plot_main(int argc, char **argv);
#endif
