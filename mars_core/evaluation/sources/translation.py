"""Translation prompts: short sentences and phrases between English and French, Spanish, German, Italian and
Portuguese, both ways (no gold: the base model's translations are its own).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .phrasing import Record, in_quotes, make_record, phrase_ask, pick_weighted, tidy_end

LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese")

EN_SENTENCES = [
    "Where is the nearest train station?",
    "I would like a table for two, please.",
    "Can you speak more slowly?",
    "My flight has been delayed by two hours.",
    "How much does this cost?",
    "I'm allergic to peanuts.",
    "We're looking for a cheap hotel near the centre.",
    "Could you call a taxi for me?",
    "Is breakfast included?",
    "I lost my wallet on the bus.",
    "The meeting has been moved to Thursday.",
    "Happy birthday! I hope you have a great day.",
    "Thank you so much for your help.",
    "I don't understand, could you repeat that?",
    "What time does the museum open?",
    "I've been learning this language for six months.",
    "The food was delicious.",
    "Can I pay by card?",
    "I need to see a doctor.",
    "Turn left at the traffic lights.",
    "It's raining again today.",
    "See you tomorrow at eight.",
    "My sister lives in London with her two children.",
    "I'm sorry I'm late.",
    "Good luck with your exam!",
    "Where can I buy a bus ticket?",
    "I'd like to book a room for three nights.",
    "Do you have this in a smaller size?",
    "The shop closes at seven on Saturdays.",
    "I'm a vegetarian.",
    "How do I get to the airport?",
    "Could you send me the invoice by email?",
    "We had a wonderful time, thank you.",
    "My phone battery is almost dead.",
    "Is there a pharmacy near here?",
    "I'll call you when I get home.",
    "The children are playing in the garden.",
    "Please close the door behind you.",
    "What do you recommend?",
    "I work as a nurse at the city hospital.",
    "Let's meet in front of the cinema.",
    "The bill, please.",
    "I forgot my umbrella at the restaurant.",
    "Excuse me, is this seat free?",
    "Have a safe trip!",
    "I've never been to Spain before.",
    "The train to the coast leaves every hour.",
    "Can you help me carry this bag?",
    "We need to buy bread, milk and eggs.",
    "My favourite season is autumn.",
    "It was nice to meet you.",
    "I think you're right.",
    "Don't worry, it's not a problem.",
    "How long does the journey take?",
    "Is this the right bus for the city centre?",
    "I'd like to change my appointment.",
    "What's the wifi password?",
    "The weather will be sunny tomorrow.",
    "I can't find my keys anywhere.",
    "Congratulations on your new job!",
    "The package should arrive in three working days.",
    "Could you recommend a good restaurant nearby?",
    "I prefer tea to coffee in the morning.",
    "We're going to the mountains this weekend.",
    "Do you speak English?",
    "I have a reservation under the name Garcia.",
    "The room is too noisy, can I change it?",
    "Get well soon!",
    "My brother is two years older than me.",
    "Please turn off your phones during the film.",
    "I'm not feeling well today.",
    "Where are the toilets?",
    "What is your name?",
    "I'm from Canada.",
    "I would like to return this shirt.",
    "The water is too cold to swim.",
    "Could we have the menu, please?",
    "I have a question about my order.",
    "The lift is out of order.",
    "It's my first time here.",
    "Could you take a photo of us?",
    "I'd like a coffee with milk and no sugar.",
    "We missed the last train.",
    "My grandmother makes the best soup in the world.",
    "I'll be there in ten minutes.",
    "Are dogs allowed inside?",
    "Please speak louder, I can't hear you.",
    "How was your weekend?",
    "What time is check-out?",
    "I'm just looking, thank you.",
    "The concert starts at nine in the evening.",
    "Can I try this on?",
    "I need a receipt, please.",
    "Welcome to our home!",
    "Sorry, I didn't mean to bother you.",
    "The doctor told me to rest for a week.",
    "Where did you park the car?",
    "I'm looking forward to seeing you.",
    "This is my friend Anna.",
    "We should leave early to avoid traffic.",
    "The library is closed on Sundays.",
    "Could you write down the address for me?",
    "I've already eaten, thanks.",
    "What's the weather like today?",
    "Merry Christmas and a happy new year!",
    "Please wait here for a moment.",
    "I love this city.",
    "Which platform does the train leave from?",
    "Can you keep a secret?",
    "My order hasn't arrived yet.",
    "The kids have a day off school on Friday.",
    "I'll have the same, please.",
    "How do you say this in your language?",
]
EN_SHORT = [
    "Good morning",
    "Good night",
    "thank you very much",
    "excuse me",
    "I love you",
    "see you later",
    "cheers!",
    "how are you?",
    "nice to meet you",
    "no problem",
    "you're welcome",
    "I'm hungry",
    "what time is it?",
    "help!",
    "let's go",
    "be careful",
    "happy new year",
    "good luck",
    "I miss you",
    "sorry",
    "the check please",
    "how much?",
    "I don't know",
    "enjoy your meal",
    "get well soon",
]

FOREIGN: dict[str, list[str]] = {
    "French": [
        "Où se trouve la gare la plus proche ?",
        "Je voudrais réserver une table pour deux personnes ce soir.",
        "Pouvez-vous parler plus lentement, s'il vous plaît ?",
        "Mon train a été annulé à cause de la grève.",
        "Nous avons passé un excellent week-end à la montagne.",
        "Est-ce que le petit-déjeuner est compris dans le prix ?",
        "J'ai oublié mon parapluie dans le bus.",
        "La réunion est reportée à jeudi prochain.",
        "Il fait trop chaud pour sortir cet après-midi.",
        "Combien coûte un billet aller-retour pour Lyon ?",
        "Je suis allergique aux noix.",
        "Merci beaucoup pour votre aide, c'était très gentil.",
        "Ma sœur habite à Marseille depuis trois ans.",
        "Le magasin ferme à dix-neuf heures le samedi.",
        "Pourriez-vous m'envoyer la facture par e-mail ?",
        "On se retrouve devant le cinéma à huit heures ?",
        "Je n'ai pas compris la question.",
        "Les enfants jouent dans le jardin depuis ce matin.",
        "Il faut prendre la deuxième rue à gauche.",
        "J'apprends le français depuis six mois.",
        "Le médecin m'a conseillé de me reposer.",
        "Est-ce qu'il y a une pharmacie près d'ici ?",
        "Nous cherchons un appartement avec deux chambres.",
        "Désolé, je suis en retard, il y avait beaucoup de circulation.",
        "Quel temps fera-t-il demain ?",
        "Ce livre m'a beaucoup plu.",
        "Pouvez-vous m'aider à porter cette valise ?",
        "L'addition, s'il vous plaît.",
        "J'aimerais changer mon rendez-vous.",
        "Bonne chance pour ton examen demain !",
        "Le colis devrait arriver dans trois jours ouvrables.",
        "Je préfère le thé au café le matin.",
    ],
    "Spanish": [
        "¿Dónde está la parada de autobús más cercana?",
        "Quisiera una mesa para cuatro, por favor.",
        "¿Puedes hablar un poco más despacio?",
        "Mañana tengo una entrevista de trabajo muy importante.",
        "Hemos alquilado una casa cerca de la playa para el verano.",
        "¿A qué hora sale el último tren a Sevilla?",
        "No me encuentro bien, creo que tengo fiebre.",
        "Me encanta cocinar con mis amigos los domingos.",
        "¿Cuánto cuesta este abrigo?",
        "Perdí mi cartera en el metro.",
        "La reunión empieza a las diez en punto.",
        "Mi hermano trabaja como enfermero en un hospital.",
        "¿Me puedes recomendar un buen restaurante por aquí?",
        "Hace mucho frío esta mañana.",
        "Gracias por invitarme a tu cumpleaños.",
        "Necesito cambiar mi billete para el viernes.",
        "¿Aceptan tarjeta de crédito?",
        "Llevo dos años estudiando inglés.",
        "El vuelo se ha retrasado una hora.",
        "¿Podrías enviarme la dirección por mensaje?",
        "Los niños ya están dormidos.",
        "Siga recto y gire a la derecha en el semáforo.",
        "Estoy buscando un regalo para mi madre.",
        "No hay prisa, tómate tu tiempo.",
        "¿Qué me recomiendas visitar en Madrid?",
        "La película fue más larga de lo que esperaba.",
        "Soy vegetariano, ¿este plato lleva carne?",
        "Te llamo cuando llegue a casa.",
        "El museo está cerrado los lunes.",
        "¡Que tengas un buen viaje!",
        "Se me olvidó traer el cargador del móvil.",
        "¿Hay wifi gratis en el hotel?",
    ],
    "German": [
        "Wo ist die nächste U-Bahn-Station?",
        "Ich hätte gern einen Kaffee mit Milch, bitte.",
        "Können Sie das bitte wiederholen?",
        "Mein Zug hat zwanzig Minuten Verspätung.",
        "Wir fahren am Wochenende an die Ostsee.",
        "Wie viel kostet das Zimmer pro Nacht?",
        "Ich habe meinen Schlüssel verloren.",
        "Das Meeting wurde auf Montag verschoben.",
        "Es regnet schon den ganzen Tag.",
        "Ich arbeite seit fünf Jahren als Lehrerin.",
        "Entschuldigung, ist dieser Platz noch frei?",
        "Vielen Dank für das schöne Geschenk!",
        "Kannst du mich morgen vom Bahnhof abholen?",
        "Die Apotheke ist gleich um die Ecke.",
        "Ich verstehe nur Bahnhof.",
        "Wir müssen noch Brot und Eier kaufen.",
        "Mein Handy ist kaputt, ich brauche ein neues.",
        "Haben Sie das auch in einer anderen Größe?",
        "Ich lerne Deutsch, weil ich in Berlin studieren möchte.",
        "Der Arzt hat gesagt, ich soll viel Wasser trinken.",
        "Wann macht der Supermarkt auf?",
        "Die Kinder spielen draußen im Schnee.",
        "Könnten Sie mir die Rechnung per E-Mail schicken?",
        "Ich freue mich auf unser Treffen nächste Woche.",
        "Biegen Sie an der Kreuzung links ab.",
        "Das Essen war ausgezeichnet, danke schön.",
        "Ich bin allergisch gegen Erdnüsse.",
        "Wie lange dauert die Fahrt nach München?",
        "Morgen soll es sonnig und warm werden.",
        "Ich habe leider keine Zeit, vielleicht ein anderes Mal.",
        "Alles Gute zum Geburtstag!",
        "Darf ich hier mit Karte bezahlen?",
    ],
    "Italian": [
        "Dov'è la stazione dei treni?",
        "Vorrei prenotare una camera doppia per tre notti.",
        "Può parlare più lentamente, per favore?",
        "Il mio volo è stato cancellato.",
        "Abbiamo mangiato una pizza buonissima a Napoli.",
        "Quanto costa un biglietto per il museo?",
        "Ho perso il portafoglio sull'autobus.",
        "La riunione è stata spostata a venerdì.",
        "Oggi fa troppo caldo per camminare.",
        "Mia nonna fa la pasta fresca ogni domenica.",
        "Scusi, sa dov'è una farmacia?",
        "Grazie mille per la bella serata.",
        "Ci vediamo davanti al bar alle sette?",
        "Non ho capito, può ripetere?",
        "Sto imparando l'italiano da un anno.",
        "Il negozio chiude alle otto di sera.",
        "Posso pagare con la carta?",
        "Vorrei un caffè e un cornetto, per favore.",
        "Il treno per Firenze parte dal binario quattro.",
        "Sono allergica ai frutti di mare.",
        "Domani pioverà tutto il giorno.",
        "Cerchiamo un appartamento in centro.",
        "Mi dispiace, sono in ritardo.",
        "Buon viaggio e divertitevi!",
        "Il medico mi ha detto di riposare.",
        "Questo vino è prodotto in Toscana.",
        "Mi può consigliare un buon ristorante?",
        "Ho dimenticato le chiavi a casa.",
        "I bambini sono già a scuola.",
        "Giri a destra dopo il ponte.",
        "Che cosa mi consigli di vedere a Roma?",
        "Il conto, per favore.",
    ],
    "Portuguese": [
        "Onde fica a estação de metrô mais próxima?",
        "Eu gostaria de uma mesa para dois, por favor.",
        "Você pode falar mais devagar?",
        "Meu voo atrasou duas horas.",
        "Passamos as férias numa praia linda no Nordeste.",
        "Quanto custa esta camiseta?",
        "Perdi o meu celular no táxi.",
        "A reunião foi adiada para quarta-feira.",
        "Está chovendo muito hoje.",
        "Minha irmã mora em Lisboa há cinco anos.",
        "Com licença, este lugar está livre?",
        "Muito obrigado pelo presente!",
        "Você pode me buscar no aeroporto amanhã?",
        "A farmácia fica logo ali na esquina.",
        "Estou aprendendo português há seis meses.",
        "O supermercado fecha às dez da noite.",
        "Aceitam cartão de crédito?",
        "Eu sou alérgico a amendoim.",
        "O médico disse que eu preciso descansar.",
        "Vamos nos encontrar na frente do cinema às oito?",
        "Não entendi a pergunta.",
        "Siga em frente e vire à esquerda no semáforo.",
        "Estamos procurando um apartamento com dois quartos.",
        "Desculpe o atraso, o trânsito estava horrível.",
        "Amanhã vai fazer sol o dia todo.",
        "Esse livro é muito bom, recomendo.",
        "Pode me mandar a fatura por e-mail?",
        "Boa sorte na prova amanhã!",
        "As crianças estão brincando no quintal.",
        "A conta, por favor.",
        "Quero trocar a minha passagem para sexta-feira.",
        "Feliz aniversário! Tudo de bom para você.",
    ],
}
VOCAB = [
    "apple",
    "house",
    "dog",
    "book",
    "window",
    "friend",
    "school",
    "water",
    "bread",
    "car",
    "tree",
    "city",
    "beach",
    "rain",
    "sun",
    "table",
    "chair",
    "kitchen",
    "money",
    "train",
    "ticket",
    "doctor",
    "teacher",
    "morning",
    "night",
    "week",
    "year",
    "red",
    "happy",
    "tired",
    "expensive",
    "cheap",
    "to eat",
    "to sleep",
    "to run",
    "to read",
    "to buy",
    "to work",
    "to travel",
    "to learn",
    "cheese",
    "milk",
    "coffee",
    "street",
    "left",
    "right",
    "today",
    "tomorrow",
    "yesterday",
    "always",
    "never",
    "family",
    "mother",
    "father",
    "brother",
    "sister",
    "shoes",
    "shirt",
    "key",
    "door",
    "phone",
    "computer",
    "flower",
    "mountain",
    "river",
    "hospital",
    "airport",
    "breakfast",
    "dinner",
    "weekend",
    "birthday",
    "holiday",
    "snow",
    "cold",
    "hot",
]


def _lang_phrase(rng: random.Random, lang: str) -> str:
    return pick_weighted(
        rng,
        [
            (lang, 6),
            (lang.lower(), 2),
            (
                {
                    "French": "Français",
                    "Spanish": "Español",
                    "German": "Deutsch",
                    "Italian": "Italiano",
                    "Portuguese": "Português",
                }[lang],
                0,
            ),
        ],
    )


def _tr_to_foreign(rng: random.Random) -> Record:
    lang = rng.choice(LANGUAGES)
    L = _lang_phrase(rng, lang)
    src = rng.choice(EN_SENTENCES) if rng.random() < 0.82 else rng.choice(EN_SHORT)
    if rng.random() < 0.1:
        src = src.lower().rstrip(".")
    q = in_quotes(rng, src)
    s = rng.randrange(14)
    if s == 0:
        p = f"Translate to {L}: {src}"
    elif s == 1:
        p = f"How do you say {q} in {L}?"
    elif s == 2:
        p = f"what's {q} in {L}"
    elif s == 3:
        p = f"Can you translate this into {L}? {q}"
    elif s == 4:
        p = f"translate {q} to {L.lower()}"
    elif s == 5:
        p = f"{L} translation please: {src}"
    elif s == 6:
        p = f"How would I say {q} in {L}? " + rng.choice(
            [
                "Formal and informal versions please.",
                "I'm writing to my host family.",
                "Keep it natural.",
                "Also how do I pronounce it?",
                "",
            ]
        )
    elif s == 7:
        p = f"Give me the {L} for {q}."
    elif s == 8:
        p = phrase_ask(rng, f"translate the following sentence into {L}", noisy=False) + "\n" + src
    elif s == 9:
        p = f"English to {L}: {src}"
    elif s == 10:
        p = f"I'm travelling next week. How do I say {q} in {L}?"
    elif s == 11:
        p = f"Translate into {L} and explain the grammar briefly: {q}"
    elif s == 12:
        p = f"In {L}, how would a native speaker say {q}?"
    else:
        p = f"Please translate {q} into {L}, just the translation."
    return make_record("translation", tidy_end(p.strip()), kind="en_to_x")


def _tr_from_foreign(rng: random.Random) -> Record:
    lang = rng.choice(LANGUAGES)
    src = rng.choice(FOREIGN[lang])
    q = in_quotes(rng, src)
    s = rng.randrange(11)
    if s == 0:
        p = f"Translate to English: {src}"
    elif s == 1:
        p = f"What does {q} mean?"
    elif s == 2:
        p = f"What does {q} mean in English?"
    elif s == 3:
        p = f"I got this message in {lang}, what does it say? {q}"
    elif s == 4:
        p = f"Translate this {lang} sentence into English: {src}"
    elif s == 5:
        p = f"translate {q} from {lang.lower()} to english"
    elif s == 6:
        p = f"{lang} to English: {src}"
    elif s == 7:
        p = f"Can you translate this for me? {q}"
    elif s == 8:
        p = f"What language is this and what does it mean? {q}"
    elif s == 9:
        p = f"Translate into English and explain any tricky words: {q}"
    else:
        p = f"My friend wrote {q}. What does that mean?"
    return make_record("translation", tidy_end(p), kind="x_to_en")


def _tr_between(rng: random.Random) -> Record:
    a, b = rng.sample(LANGUAGES, 2)
    src = rng.choice(FOREIGN[a])
    q = in_quotes(rng, src)
    s = rng.randrange(4)
    if s == 0:
        p = f"Translate from {a} to {b}: {src}"
    elif s == 1:
        p = f"How do you say {q} in {b}?"
    elif s == 2:
        p = f"{a} -> {b}: {src}"
    else:
        p = f"Translate {q} into {b} and English."
    return make_record("translation", tidy_end(p), kind="x_to_y")


def _tr_vocab(rng: random.Random) -> Record:
    lang = rng.choice(LANGUAGES)
    words = rng.sample(VOCAB, rng.randint(1, 6))
    s = rng.randrange(5)
    if len(words) == 1:
        w = words[0]
        p = rng.choice(
            [
                f"What's the {lang} word for {w}?",
                f"How do you say '{w}' in {lang}?",
                f"{w} in {lang.lower()}?",
                f"What is {w} in {lang}? Include the article if it has one.",
            ]
        )
    elif s == 0:
        p = f"Translate these words into {lang}: {', '.join(words)}"
    elif s == 1:
        p = f"Give me the {lang} words for {', '.join(words[:-1])} and {words[-1]}."
    elif s == 2:
        p = f"Make a small {lang} vocabulary table with these words: {', '.join(words)}"
    elif s == 3:
        p = f"how do you say {', '.join(words)} in {lang.lower()}"
    else:
        p = f"Translate into {lang} and use each word in a short example sentence: {', '.join(words)}"
    return make_record("translation", p, kind="vocab")


_TRANSLATION_KINDS: list[tuple[Callable[[random.Random], Record], int]] = [
    (_tr_to_foreign, 10),
    (_tr_from_foreign, 7),
    (_tr_between, 2),
    (_tr_vocab, 3),
]


def gen_translation(rng: random.Random) -> Record:
    return pick_weighted(rng, _TRANSLATION_KINDS)(rng)
