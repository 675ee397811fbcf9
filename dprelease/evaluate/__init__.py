"""NOT PRIVATE: accuracy studies on test data, simulated releases compared with the exact
histograms (`accuracy`), and how often each stated margin holds (`coverage`)."""
