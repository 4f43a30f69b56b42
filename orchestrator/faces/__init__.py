"""The faces: the command line, the web page, the HTML report, and the composition root
(`wiring`) that builds the live services they hand to the controller."""
