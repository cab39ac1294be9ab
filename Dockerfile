FROM python:3.11-slim
WORKDIR /app
COPY . /app
# OCR of scanned PDFs and images (ingestion.parsing.ocr).
RUN apt-get update && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng \
    && rm -rf /var/lib/apt/lists/*
# Editable, so templates/ and static/ are found next to the code.
RUN pip install --no-cache-dir -e . && useradd --system ragmux
USER ragmux
ENV HOST=0.0.0.0 PORT=8765
EXPOSE 8765
CMD ["ragmux", "serve", "--no-worker"]
