#!/bin/bash
printf '#!/bin/sh\nif [ $# -gt 0 ]; then printf "Hello, %%s!\\n" "$1"; else echo "Hello, World!"; fi\n' > /app/greet.sh
chmod 755 /app/greet.sh
