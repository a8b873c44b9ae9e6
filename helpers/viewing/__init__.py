"""Looking at attention: ``plotting`` (matplotlib figures), ``head_view`` (the interactive view of every layer and
head, with its JavaScript in ``static/``) and ``widgets`` (the ipywidgets explorers)."""
