"""``v05 bench matrix GRID.yaml``: every method of a declared grid, on every task setting, at one budget per task.

A grid (YAML, ``benchmarks/grids/``) names task settings (each a list of config overrides, its regime and pool),
methods (a packaged config or file plus overrides, optionally only on some task settings) and seeds. Each cell
(task, method, seed) is a normal run directory ``OUT/TASK/METHOD-sSEED``: a finished cell is reused, an interrupted
one resumed, so the grid can run in parts and on several machines (its store).

- :mod:`v05.grid.spec`: the grid file (:func:`~v05.grid.spec.load_grid`), its tuning and attribution entries;
- :mod:`v05.grid.cells`: the cells a grid plans, with their resolved configs;
- :mod:`v05.grid.store`: a cell's state, the store of finished cells and warm starts;
- :mod:`v05.grid.tuning`: the equal tuning budget, the chosen settings and the recommended configuration;
- :mod:`v05.grid.run`: training the cells (worker processes) and :func:`~v05.grid.run.bench_matrix`;
- :mod:`v05.grid.results`: the results JSON (every method against the reference, paired by seed; attribution);
- :mod:`v05.grid.ran`: what the cells ran (batch, learning rate, schedule) and the warm starts as measured;
- :mod:`v05.grid.render`: the headline tables, ``OUT/index.html``, the results page and the README section;
- :mod:`v05.grid.cli`: the ``v05 bench matrix`` parser.

The statistics are :mod:`v05.stats`'s, the hardware label :mod:`v05.hardware`'s. Importing this package imports
nothing else (the modules need the trainer's extra, torch).
"""
